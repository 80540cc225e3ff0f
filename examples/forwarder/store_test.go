package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/examples/internal/storeflag"
	"github.com/queuekit/queue/storekit"
)

// The servers the store tests use; they skip without them, except in CI.
var storeURLs = map[string]string{
	"postgres": "postgres://postgres@127.0.0.1:5432/test?sslmode=disable",
	"redis":    "redis://127.0.0.1:6379/0",
}

// openTestStore opens url's store as -store does, skipping the test when
// the server is down outside CI.
func openTestStore(t *testing.T, url string) (storekit.Store[fwdJob], func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, closeStore, err := storeflag.Open[fwdJob](ctx, url)
	if err != nil && os.Getenv("CI") != "true" {
		t.Skipf("store unavailable: %v", err)
	}
	require.NoError(t, err)
	return s, closeStore
}

// Forwards queued in a durable store survive the forwarder: a second
// forwarder on the same store and queue name (a restart, or another
// instance sharing the queue) runs them.
func TestQueuedForwardsSurviveARestart(t *testing.T) {
	for kind, url := range storeURLs {
		t.Run(kind, func(t *testing.T) {
			var b [6]byte
			rand.Read(b[:])
			name := "forwarder-test-" + hex.EncodeToString(b[:])
			up, err := startSimServer(newSimTracker(simFast))
			require.NoError(t, err)
			t.Cleanup(up.Close)
			newForwarder := func(store storekit.Store[fwdJob], ev *eventLog) *Forwarder {
				u, err := ParseUpstream("up="+up.URL, newHTTPClient(5*time.Second))
				require.NoError(t, err)
				f, err := NewForwarder(Options{Upstreams: []*Upstream{u}, Store: store},
					queue.WithName(name), queue.WithWorkers(1, 2), queue.WithObserver(ev.hook))
				require.NoError(t, err)
				return f
			}

			// The first forwarder accepts two announces but never runs
			// its queue: it stops with both forwards queued.
			store1, close1 := openTestStore(t, url)
			f1 := newForwarder(store1, newEventLog())
			srv := httptest.NewServer(f1.Handler())
			h := &harness{f: f1, srv: srv}
			for i := 1; i <= 2; i++ {
				r := h.announce(t, clientQuery(i, i, 7000+i, map[string]string{"event": "started"}))
				require.Empty(t, r.Failure)
			}
			srv.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			f1.Shutdown(ctx)
			close1()
			require.Zero(t, up.Hits())

			// The second one, on a new connection, runs them.
			store2, close2 := openTestStore(t, url)
			ev := newEventLog()
			f2 := newForwarder(store2, ev)
			t.Cleanup(func() {
				f2.Queue().Purge(context.Background())
				f2.Shutdown(context.Background())
				close2()
			})
			require.NoError(t, f2.Start(context.Background()))
			ev.wait(t, queue.EventDone, "up", 2)
			assert.Equal(t, int64(2), up.Hits())
			for i := 1; i <= 2; i++ {
				hash, peer := hexOf(i, i)
				assert.Equal(t, []string{"started"}, up.Events(hash, peer), "the peer's own announce, event and all")
			}
		})
	}
}
