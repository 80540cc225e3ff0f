//go:build linux || darwin

package queue_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queuekit/queue"
)

// BenchmarkEnqueueRunProducers is BenchmarkEnqueueRun's queue and channel
// cases fed by 1 and 4 producer goroutines sharing b.N jobs, with the
// capacity qbench gives both (65 536): the in-process target asks that 4
// producers move jobs as fast as 1. As in qbench, the handler does
// nothing and a run is timed from the first job to the end of the drain
// (close and wait for the channel, Stop for the queue). Besides jobs/s it reports cpu-ns/op,
// the process's CPU time per job, which a busy shared machine disturbs
// far less than wall time, and which shows what contention between the
// producers costs, and retries/op, the Enqueue calls refused with
// ErrQueueFull (the producer yields and tries again, as qbench's do). Compare:
//
//	go test -run '^$' -bench EnqueueRunProducers -benchtime 1000000x -count 6 . | benchstat -col /p -
func BenchmarkEnqueueRunProducers(b *testing.B) {
	const capacity = 65536
	for _, p := range []int{1, 4} {
		b.Run(fmt.Sprintf("channel/p=%d", p), func(b *testing.B) {
			b.ReportAllocs()
			ch := make(chan int, capacity)
			var wg sync.WaitGroup
			for range benchWorkers {
				wg.Go(func() {
					for range ch {
					}
				})
			}
			b.ResetTimer()
			cpu0 := cpuTime()
			produce(b.N, p, func(i int) { ch <- i })
			close(ch)
			wg.Wait()
			reportCPU(b, cpu0)
		})
		for _, keyed := range []bool{false, true} {
			name := fmt.Sprintf("queue/no-key/p=%d", p)
			if keyed {
				name = fmt.Sprintf("queue/keys/p=%d", p)
			}
			b.Run(name, func(b *testing.B) {
				b.ReportAllocs()
				var keys []string
				if keyed {
					keys = make([]string, b.N)
					for i := range keys {
						keys[i] = fmt.Sprintf("infohash%08d:forwarder:peer", i)
					}
				}
				q := started[int](b)(queue.New(func(context.Context, queue.Job[int]) error { return nil },
					queue.WithCapacity(capacity, 0), queue.WithWorkers(benchWorkers, benchWorkers)))
				ctx := context.Background()
				var retries atomic.Int64 // Enqueue calls refused with ErrQueueFull
				b.ResetTimer()
				cpu0 := cpuTime()
				produce(b.N, p, func(i int) {
					job := queue.Job[int]{Payload: i}
					if keys != nil {
						job.Key = keys[i]
					}
					for {
						err := q.Enqueue(ctx, job)
						if err == nil {
							return
						}
						if !errors.Is(err, queue.ErrQueueFull) {
							b.Fatal(err)
						}
						retries.Add(1)
						runtime.Gosched()
					}
				})
				if err := q.Stop(ctx); err != nil {
					b.Fatal(err)
				}
				reportCPU(b, cpu0)
				b.ReportMetric(float64(retries.Load())/float64(b.N), "retries/op")
				if st := q.Stats(); st.Done != uint64(b.N) {
					b.Fatalf("%d jobs done, want %d", st.Done, b.N)
				}
			})
		}
	}
}

// produce calls submit for 0..n-1 from p goroutines, each taking a
// contiguous share, and returns when all have returned.
func produce(n, p int, submit func(int)) {
	var wg sync.WaitGroup
	for g := range p {
		lo, hi := g*n/p, (g+1)*n/p
		wg.Go(func() {
			for i := lo; i < hi; i++ {
				submit(i)
			}
		})
	}
	wg.Wait()
}

// reportCPU stops the timer and reports jobs/s and the CPU time per job
// since cpu0.
func reportCPU(b *testing.B, cpu0 time.Duration) {
	cpu := cpuTime() - cpu0
	b.StopTimer()
	reportJobs(b)
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
}
