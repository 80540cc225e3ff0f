package queue_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/queuetest"
	"github.com/stretchr/testify/require"
)

// TestLowPriorityNotStarved: one worker, jobs of a (fake) second each, and
// a saturating stream of high-priority jobs (each one run enqueues two
// more, up to the capacity). Under the default weighted priorities a
// low-priority job enqueued into that stream runs within one turn of the
// 6:3:1 cycle (ten claims, so ten seconds plus the job running when it
// arrived); under strict priorities it waits for as long as the stream
// lasts.
func TestLowPriorityNotStarved(t *testing.T) {
	strict := queue.DefaultPriorities()
	for i := range strict {
		strict[i].Share = 0
	}
	for _, c := range []struct {
		name    string
		opts    []queue.Option
		starves bool
	}{
		{"weighted", nil, false},
		{"strict", []queue.Option{queue.WithPriorities("", strict...)}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var q *queue.Queue[string]
				var stream atomic.Bool
				stream.Store(true)
				lowRan := make(chan time.Time, 1)
				h := func(ctx context.Context, j queue.Job[string]) error {
					select { // the job's work: a second of the bubble's fake time
					case <-time.After(time.Second):
					case <-ctx.Done():
						return ctx.Err()
					}
					if j.Payload == "low" {
						lowRan <- time.Now()
						return nil
					}
					for range 2 {
						if !stream.Load() {
							break
						}
						err := q.Enqueue(ctx, queue.Job[string]{Payload: "high", Priority: "high"})
						if err != nil && !errors.Is(err, queue.ErrQueueFull) {
							return err
						}
					}
					return nil
				}
				q = newQueue(t, h, append([]queue.Option{queue.WithWorkers(1, 1), queue.WithCapacity(50, 0)}, c.opts...)...)
				for range 20 {
					require.NoError(t, q.Enqueue(bg, queue.Job[string]{Payload: "high", Priority: "high"}))
				}
				require.NoError(t, q.Start(bg))
				queuetest.Advance(30 * time.Second) // let the stream saturate the queue
				require.NoError(t, q.Enqueue(bg, queue.Job[string]{Payload: "low", Priority: "low"}))
				start := time.Now()
				select {
				case at := <-lowRan:
					if c.starves {
						t.Fatalf("strict: the low-priority job ran after %s despite the high-priority stream", at.Sub(start))
					}
					t.Logf("the low-priority job waited %s", at.Sub(start))
					if wait := at.Sub(start); wait > 11*time.Second {
						t.Fatalf("the low-priority job waited %s, want at most 11s (ten claims of 1s, plus the running job)", wait)
					}
				case <-time.After(time.Hour):
					if !c.starves {
						t.Fatal("the low-priority job did not run within an hour of a saturating high-priority stream")
					}
				}
				t.Logf("%d ready jobs when the stream stopped", q.Stats().Store.Ready)
				stream.Store(false)
				require.NoError(t, q.Shutdown(bg))
			})
		})
	}
}
