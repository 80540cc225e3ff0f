// Package storebench holds the benchmarks that the durable stores'
// modules (pgstore, redisstore) run alike, each on its own store beside
// the in-memory one. A store of another module runs them the same way
// from its own benchmark functions.
//
// Like storetest, it is a test kit: its functions may change in a minor
// release when the benchmarks do (see docs/RELEASING.md).
package storebench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/storekit"
)

// Fanout compares Fanout over 100 targets (10 suspended, 10 not yet due
// for the key) on the in-memory store (sub-benchmark "memory") and on the
// store that newStore makes (sub-benchmark name), whose target health and
// cadence are shared through its server: nothing changes during the
// loop, so Fanout reads the process's own view and makes no round trip
// (the view's reload, once a second, runs beside it).
func Fanout(b *testing.B, name string, newStore func(b *testing.B) storekit.Store[int]) {
	nop := func(context.Context, queue.Job[int]) error { return nil }
	quiet := queue.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
	b.Run("memory", func(b *testing.B) {
		q, err := queue.New(nop, quiet)
		if err != nil {
			b.Fatal(err)
		}
		fanout(b, q)
	})
	b.Run(name, func(b *testing.B) {
		q, err := queue.NewWithStore(newStore(b), nop, queue.WithName("bench"), quiet)
		if err != nil {
			b.Fatal(err)
		}
		fanout(b, q)
	})
}

func fanout(b *testing.B, q *queue.Queue[int]) {
	ctx := context.Background()
	if err := q.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = q.Shutdown(ctx) }()
	cands := make([]string, 100)
	for i := range cands {
		cands[i] = fmt.Sprintf("udp://tracker%03d.example:6969/announce", i)
	}
	for _, c := range cands[:10] {
		if err := q.Suspend(c, time.Hour); err != nil {
			b.Fatal(err)
		}
	}
	for _, c := range cands[10:20] {
		q.SetNextDue(c, "infohash", time.Now().Add(time.Hour))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if got := q.Fanout("infohash", cands); len(got) != 80 {
			b.Fatalf("got %d targets", len(got))
		}
	}
}
