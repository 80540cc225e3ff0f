package jobkinds_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/internal/jobkinds"
	"github.com/queuekit/queue/queuetest"
)

// Every kind of the default catalog ends the way it says, the same way on
// every run.
func TestDefaultCatalog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := jobkinds.Handler(jobkinds.DefaultCatalog(), func(k string) string { return k })
		q, err := queue.New(h, queue.WithWorkers(4, 4), queue.WithRetry(0, time.Second, time.Second))
		if err != nil {
			t.Fatal(err)
		}
		queuetest.Start(t, q)
		for _, k := range []string{"noop", "quick", "slow", "flaky", "fatal", "failing", "retry-in", "panic", "unknown"} {
			if err := q.Enqueue(context.Background(), queue.Job[string]{Key: k, Payload: k}); err != nil {
				t.Fatal(err)
			}
		}
		queuetest.Advance(time.Minute)
		st := queuetest.CheckCounts(t, q)
		// Done: noop, quick, slow, flaky, retry-in. Dead: fatal, failing, panic, unknown.
		if st.Done != 5 || st.Dead != 4 || st.Panics != 3 {
			t.Fatalf("done %d dead %d panics %d; want 5, 4, 3 (panic runs 3 times)", st.Done, st.Dead, st.Panics)
		}
	})
}
