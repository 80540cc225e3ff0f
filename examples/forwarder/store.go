package main

import (
	"strings"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/storekit"
)

// newQueue builds the forwarder's queue on store, or on the in-memory
// store when store is nil. It is the one place that hands the forwarder's
// store to the library.
func newQueue(store storekit.Store[fwdJob], h queue.Handler[fwdJob], opts []queue.Option) (*queue.Queue[fwdJob], error) {
	if store == nil {
		return queue.New(h, opts...)
	}
	return queue.NewWithStore(store, h, opts...)
}

// storeKind names the kind of store a -store value selects, for logs:
// never the URL, which may hold a password.
func storeKind(url string) string {
	switch {
	case strings.HasPrefix(url, "postgres"):
		return "postgres"
	case strings.HasPrefix(url, "redis"):
		return "redis"
	case strings.HasPrefix(url, "sqlite"):
		return "sqlite"
	}
	return "memory"
}
