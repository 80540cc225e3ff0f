package queue_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/queuekit/queue"
)

// A host registers the queue's metrics on its own registry, which it
// serves on /metrics; every series carries the queue's name. Stopping the
// queue unregisters them.
func ExampleWithMetrics() {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	var done sync.WaitGroup
	done.Add(3)
	q, err := queue.New(func(ctx context.Context, j queue.Job[string]) error {
		return nil // send the welcome mail to j.Payload
	},
		queue.WithName("mail"),
		queue.WithMetrics(reg, 0),
		queue.WithObserver(func(ev queue.Event) {
			if ev.Kind == queue.EventDone {
				done.Done()
			}
		}))
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := q.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	for _, to := range []string{"ann@example.org", "bob@example.org", "cy@example.org"} {
		if err := q.Enqueue(ctx, queue.Job[string]{Key: "welcome:" + to, Payload: to}); err != nil {
			fmt.Println(err)
		}
	}
	done.Wait()

	metrics := promhttp.HandlerFor(reg, promhttp.HandlerOpts{}) // mux.Handle("/metrics", metrics)
	w := httptest.NewRecorder()
	metrics.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for _, line := range strings.Split(w.Body.String(), "\n") {
		for _, name := range []string{"queue_capacity", "queue_jobs_enqueued_total", "queue_jobs_finished_total"} {
			if strings.HasPrefix(line, name+"{") {
				fmt.Println(line)
			}
		}
	}

	if err := q.Stop(ctx); err != nil {
		fmt.Println(err)
	}
	mfs, _ := reg.Gather()
	fmt.Println("metric families after Stop:", len(mfs))
	// Output:
	// queue_capacity{queue="mail"} 10000
	// queue_jobs_enqueued_total{queue="mail"} 3
	// queue_jobs_finished_total{outcome="cancelled",queue="mail"} 0
	// queue_jobs_finished_total{outcome="dead",queue="mail"} 0
	// queue_jobs_finished_total{outcome="done",queue="mail"} 3
	// metric families after Stop: 0
}

// StatsHandler serves /stats: text for people, JSON (?format=json
// or Accept: application/json) for scripts. Payloads never appear.
func ExampleQueue_StatsHandler() {
	ctx := context.Background()
	var done sync.WaitGroup
	done.Add(2)
	q, err := queue.New(func(ctx context.Context, j queue.Job[string]) error { return nil },
		queue.WithName("announces"),
		queue.WithCapacity(1000, 0),
		queue.WithWorkers(4, 8),
		queue.WithObserver(func(ev queue.Event) {
			if ev.Kind == queue.EventDone {
				done.Done()
			}
		}))
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := q.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer q.Stop(ctx)
	for _, peer := range []string{"10.0.0.1:6881", "10.0.0.2:51413"} {
		_ = q.Enqueue(ctx, queue.Job[string]{Key: "hash1:tracker1:" + peer, Target: "tracker1", Payload: peer})
	}
	done.Wait()

	stats := q.StatsHandler() // mux.Handle("GET /stats", stats)
	w := httptest.NewRecorder()
	stats.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/stats", nil))
	os.Stdout.Write(w.Body.Bytes())
	// Output:
	// queue announces (running, store memory)
	// depth 0 / 1000 (0.0% full), scheduled 0, running 0, pending keys 0
	// ready by priority: high=0 low=0 normal=0
	// workers 4 active (base 4, max 8)
	// enqueued 2  done 2  retried 0  failed 0  dead 0  cancelled 0
	// dropped_full 0  dropped_limit 0  rate_limited 0  throttled 0  coalesced 0  requeued 0  deferred 0  rescued 0  panics 0
}
