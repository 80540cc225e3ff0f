package redisstore

import (
	"testing"
	"time"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/queuetest"
)

func TestConformance(t *testing.T) {
	c := needRedis(t)
	queuetest.RunStoreTests(t, queuetest.StoreFeatures{Capacity: true, LeaseTTL: 30 * time.Second},
		func(t *testing.T) queue.Store[queuetest.Payload] {
			s, err := New[queuetest.Payload](c, WithPrefix(testPrefix(t, c)))
			if err != nil {
				t.Fatal(err)
			}
			return s
		})
}
