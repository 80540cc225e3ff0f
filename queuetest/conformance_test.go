package queuetest_test

import (
	"testing"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/queuetest"
)

func TestMemoryStoreConformance(t *testing.T) {
	queuetest.RunStoreTests(t, queuetest.StoreFeatures{Capacity: true, DrainsReady: true},
		func(t *testing.T) queue.Store[queuetest.Payload] { return queue.NewMemoryStore[queuetest.Payload]() })
}
