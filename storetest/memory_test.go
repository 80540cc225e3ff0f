package storetest_test

import (
	"testing"

	"github.com/queuekit/queue/internal/memstore"
	"github.com/queuekit/queue/storekit"
	"github.com/queuekit/queue/storetest"
)

// The in-memory store passes the whole contract, every feature included.
func TestMemoryStoreConformance(t *testing.T) {
	storetest.Run(t, storetest.Features{Capacity: true, DrainsReady: true},
		func(t *testing.T) storekit.Store[storetest.Payload] { return memstore.New[storetest.Payload]() })
}

// The in-memory store passes the admin section.
func TestMemoryStoreAdmin(t *testing.T) {
	storetest.RunAdmin(t, func(t *testing.T) storekit.Store[storetest.Payload] { return memstore.New[storetest.Payload]() })
}
