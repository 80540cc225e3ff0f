package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/queuekit/queue"
)

// nopAnnouncer answers at once, so the benchmark measures the forwarder,
// not a network.
type nopAnnouncer struct{}

func (nopAnnouncer) announce(context.Context, *Announce, Event) (*Reply, error) {
	return &Reply{Interval: time.Nanosecond}, nil
}

type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *discardWriter) WriteHeader(int)             {}

// BenchmarkAnnounce is one client announce through the handler: parse,
// admission (q.Admit), fan-out to 20 upstreams (q.Fanout), 20 Enqueues
// and the bencoded answer. Every announce is a new peer, so each one is
// admitted and fans out to all 20; the queue is not started, so jobs
// accumulate and are purged, untimed, every cycle.
func BenchmarkAnnounce(b *testing.B) {
	const upstreams, cycle, torrents = 20, 1000, 250
	var ups []*Upstream
	for i := range upstreams {
		ups = append(ups, &Upstream{Name: fmt.Sprintf("up-%02d", i), client: nopAnnouncer{}})
	}
	f, err := NewForwarder(Options{Upstreams: ups}, queue.WithCapacity(1<<20, 0))
	if err != nil {
		b.Fatal(err)
	}
	reqs := make([]*http.Request, cycle)
	for i := range reqs {
		reqs[i] = httptest.NewRequest(http.MethodGet, "/announce?"+clientQuery(i%torrents, i, 6881, map[string]string{"event": "started"}), nil)
	}
	w := &discardWriter{h: http.Header{}}
	ctx := context.Background()
	var untimedCPU time.Duration
	reset := func() {
		b.StopTimer()
		c := cpuTime()
		f.q.Purge(ctx)
		f.swarms = newSwarms(time.Hour, defaultMaxPeers)
		untimedCPU += cpuTime() - c
		b.StartTimer()
	}
	f.ServeAnnounce(w, reqs[0]) // warm up, and check it fans out
	if st := f.q.Stats(); st.Enqueued != upstreams {
		b.Fatalf("enqueued %d jobs, want %d", st.Enqueued, upstreams)
	}
	reset()
	b.ReportAllocs()
	cpu0, untimedCPU := cpuTime(), time.Duration(0)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%cycle == 0 && i > 0 {
			reset()
		}
		f.ServeAnnounce(w, reqs[i%cycle])
	}
	b.StopTimer()
	// CPU time per op, the untimed purges left out: on a shared machine
	// wall time per op says as much about the neighbours as about us.
	// (The garbage the purges leave is still collected on the clock.)
	b.ReportMetric(float64(cpuTime()-cpu0-untimedCPU)/float64(b.N), "cpu-ns/op")
	st := f.q.Stats()
	if st.RateLimited > 0 || st.Throttled > 0 {
		b.Fatalf("benchmark hit admission control: %+v", st.Counts)
	}
	b.ReportMetric(float64(st.Enqueued)/float64(b.N+1), "jobs/op")
}
