//go:build linux || darwin

package queue_test

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/queuekit/queue"
)

// BenchmarkMetricsOverhead is the core enqueue→run path with metrics off
// and on: ten workers, a no-op handler, one producer enqueueing b.N jobs
// (retrying on ErrQueueFull), timed until every job has run. Metrics may
// cost at most 15 % of throughput. Besides wall time per job it
// reports cpu-ns/op, the process's user+system CPU time per job, which a
// busy shared machine disturbs far less than wall time. Compare:
//
//	go test -run '^$' -bench 'MetricsOverhead/(off|on)$' -benchtime 500000x -count 5 . | benchstat -col /sub -
//
// on-sample-all times every job (WithMetrics(nil, 1)): the worst case.
func BenchmarkMetricsOverhead(b *testing.B) {
	for _, bc := range []struct {
		name string
		opts func() []queue.Option
	}{
		{"off", func() []queue.Option { return nil }},
		{"on", func() []queue.Option { return []queue.Option{queue.WithMetrics(prometheus.NewRegistry(), 0)} }},
		{"on-sample-all", func() []queue.Option {
			return []queue.Option{queue.WithMetrics(prometheus.NewRegistry(), 1)}
		}},
	} {
		b.Run(bc.name, func(b *testing.B) { benchEnqueueRun(b, bc.opts()...) })
	}
}

func benchEnqueueRun(b *testing.B, opts ...queue.Option) {
	var ran atomic.Int64
	all := make(chan struct{})
	n := int64(b.N)
	opts = append([]queue.Option{queue.WithWorkers(10, 10)}, opts...) // as BenchmarkEnqueueRun/queue
	q := started[int](b)(queue.New(func(context.Context, queue.Job[int]) error {
		if ran.Add(1) == n {
			close(all)
		}
		return nil
	}, opts...))
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := range b.N {
		for {
			err := q.Enqueue(ctx, queue.Job[int]{Payload: i})
			if err == nil {
				break
			}
			if !errors.Is(err, queue.ErrQueueFull) {
				b.Fatal(err)
			}
			runtime.Gosched()
		}
	}
	<-all
	cpu := cpuTime() - cpu0
	b.StopTimer()
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	if err := q.Stop(ctx); err != nil {
		b.Fatal(err)
	}
}

// cpuTime returns the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
