package fleettest

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/admin"
	"github.com/queuekit/queue/storekit"
)

// The payloads of ResumeReleasesHeld's jobs.
const (
	busy    = 1 // occupies the first queue's only worker until its Shutdown
	held    = 2 // for target api, held by the second queue
	planned = 3 // for target api, scheduled an hour ahead on purpose
	viaCLI  = 4 // for target api, held again and released by the store's admin backend
)

// ResumeReleasesHeld checks, on a durable store, that a Resume in one
// process releases the jobs another process holds for the target: two
// queues of one name on one store (newStore makes a store of the test's
// queue each call) stand for two processes. The first queue's only
// worker is kept busy, so that the second queue claims every job of
// target api. The first suspends api for an hour; the second, once it
// sees the suspension, holds api's job; the first resumes api, and the
// held job runs at once while a job of api scheduled an hour ahead keeps
// its time. Then api is suspended again, another job is held, and the
// store's own admin backend (admin, what queuectl opens) resumes api: the
// job runs at once too. tick is how often a view that follows the store
// is polled.
func ResumeReleasesHeld(t *testing.T, newStore func(t *testing.T) storekit.Store[int], tick time.Duration) {
	ctx := context.Background()
	ran := make(chan int, 8)
	handler := func(ctx context.Context, job queue.Job[int]) error {
		if job.Payload == busy {
			<-ctx.Done() // the Shutdown at the end of the test
		}
		ran <- job.Payload
		return nil
	}
	opts := []queue.Option{queue.WithName("held"), queue.WithWorkers(1, 1),
		queue.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))}
	start := func() *queue.Queue[int] {
		q, err := queue.NewWithStore(newStore(t), handler, opts...)
		require.NoError(t, err)
		require.NoError(t, q.Start(ctx))
		t.Cleanup(func() { _ = q.Shutdown(ctx) })
		return q
	}
	first := start()
	require.NoError(t, first.Enqueue(ctx, queue.Job[int]{Payload: busy}))
	require.Eventually(t, func() bool { return first.Stats().Running == 1 }, 10*time.Second, tick, "the first queue never ran its busy job")

	require.NoError(t, first.Suspend("api", time.Hour))
	second := start()
	AwaitStatus(t, second, "api", `disabled=false reason="" suspended=true breaker=closed`, tick)
	require.NoError(t, second.Enqueue(ctx, queue.Job[int]{Payload: planned, Target: "api", RunAt: time.Now().Add(time.Hour)}))
	require.NoError(t, second.Enqueue(ctx, queue.Job[int]{Payload: held, Target: "api"}))
	awaitHeld(t, second, 0, tick)

	resumed := time.Now()
	require.NoError(t, first.Resume("api"))
	awaitRun(t, ran, held)
	t.Logf("the held job ran %s after the Resume in the other process", time.Since(resumed).Round(time.Millisecond))
	require.Equal(t, 1, second.Stats().Store.Scheduled, "the job scheduled an hour ahead keeps its time")

	// The store's admin backend, bound by a queue that does not run.
	s := newStore(t)
	bound, err := queue.NewWithStore(s, handler, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = bound.Shutdown(ctx) })
	adm, ok := s.(interface{ Admin() admin.Store }).Admin().(admin.Targets)
	require.True(t, ok, "the store's admin backend has no target actions")
	require.NoError(t, first.Suspend("api", time.Hour))
	AwaitStatus(t, second, "api", `disabled=false reason="" suspended=true breaker=closed`, tick)
	// The held job may have been held twice: a claim of it made after the
	// Resume released it and before the second queue learnt of the Resume
	// holds it again, until the second queue learns (it ran all the same).
	deferred := second.Stats().Deferred
	require.NoError(t, second.Enqueue(ctx, queue.Job[int]{Payload: viaCLI, Target: "api"}))
	awaitHeld(t, second, deferred, tick)
	require.NoError(t, adm.ResumeTarget(ctx, "api"))
	awaitRun(t, ran, viaCLI)
	require.Equal(t, 1, second.Stats().Store.Scheduled, "the job scheduled an hour ahead keeps its time")
}

// awaitHeld waits up to 10 seconds for q to have held a job since it had
// held before.
func awaitHeld(t *testing.T, q *queue.Queue[int], before uint64, tick time.Duration) {
	t.Helper()
	require.Eventually(t, func() bool { return q.Stats().Deferred > before }, 10*time.Second, tick, "the second queue never held the job")
}

// awaitRun waits up to 10 seconds for a run of payload.
func awaitRun(t *testing.T, ran <-chan int, payload int) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case p := <-ran:
			if p == payload {
				return
			}
			if p != busy {
				t.Fatalf("job %d ran, want %d", p, payload)
			}
		case <-deadline:
			t.Fatalf("job %d did not run within 10s", payload)
		}
	}
}
