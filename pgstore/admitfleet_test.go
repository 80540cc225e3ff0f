package pgstore_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/queuekit/queue"
	"github.com/queuekit/queue/pgstore"
	"github.com/queuekit/queue/queuetest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The fleet's admission bucket: burst 100 at a negligible rate, leased in
// fives (queue's Burst/20).
const (
	fleetBurst = 100
	fleetLease = 5
)

// admitChild is the "admit" helper process: a queue on "proc" whose one
// worker holds a job, so that the queue is filled past its 1 % admission
// threshold by the jobs the parent enqueued. It prints READY once it sees
// them, waits for a line on stdin, calls Admit 300 times, prints how many
// were admitted, and stops when stdin closes.
func admitChild(t *testing.T, pool *pgxpool.Pool, schema, id string) {
	ctx := context.Background()
	s, err := pgstore.New[int](pool, pgstore.WithSchema(schema), pgstore.WithWorkerID(id), pgstore.WithPollInterval(50*time.Millisecond))
	require.NoError(t, err)
	hold := func(ctx context.Context, _ queue.Job[int]) error { <-ctx.Done(); return ctx.Err() }
	q, err := queue.NewWithStore(s, hold, queue.WithName("proc"), queue.WithWorkers(1, 1), queue.WithCapacity(100, 0),
		queue.WithRateLimit(queue.RateLimit{FillPct: 1, PerSecond: 1e-3, Burst: fleetBurst}), queue.WithLogger(quietLogger()))
	require.NoError(t, err)
	require.NoError(t, q.Start(ctx))
	// The first count of the ready jobs, at Start: polled, as in the parent.
	require.Eventually(t, func() bool { return q.Stats().Depth > 0 }, 20*time.Second, pollTick, "the fill was never seen")
	fmt.Println("READY")
	in := bufio.NewReader(os.Stdin)
	_, _ = in.ReadString('\n')
	n := 0
	for range 300 {
		if q.Admit() == nil {
			n++
		}
	}
	fmt.Printf("ADMITTED %d\n", n)
	_, _ = in.ReadString('\n') // EOF: stop
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	_ = q.Shutdown(sctx)
}

// waitLine waits for a line of c's output starting with prefix and
// returns its remainder.
func waitLine(t *testing.T, c *child, prefix string) string {
	t.Helper()
	var rest string
	require.Eventually(t, func() bool {
		for _, l := range strings.Split(c.output(), "\n") {
			if r, ok := strings.CutPrefix(l, prefix); ok {
				rest = r
				return true
			}
		}
		return false
	}, 30*time.Second, pollTick, "child never printed %q:\n%s", prefix, c.output())
	return rest
}

// TestFleetAdmissionOneBucket: two processes on one queue, both past the
// fill threshold, admit one bucket's worth between them (within the bound
// of processes × lease), not one each.
func TestFleetAdmissionOneBucket(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := producer(t, e)
	enqueue(t, p, 50)
	var kids []*child
	for i := range 2 {
		kids = append(kids, startChild(t, e, "admit", fmt.Sprintf("admit-%d", i)))
	}
	for _, c := range kids {
		waitLine(t, c, "READY")
	}
	for _, c := range kids {
		_, err := c.stdin.Write([]byte("go\n"))
		require.NoError(t, err)
	}
	total := 0
	for _, c := range kids {
		n, err := strconv.Atoi(strings.TrimSpace(waitLine(t, c, "ADMITTED ")))
		require.NoError(t, err)
		total += n
	}
	for _, c := range kids {
		c.stop(t)
	}
	t.Logf("admitted %d of a burst of %d", total, fleetBurst)
	assert.LessOrEqual(t, total, fleetBurst, "the bucket is taken in leases: never more than it holds")
	assert.GreaterOrEqual(t, total, fleetBurst-2*fleetLease, "at most a lease per process left unspent")
}

// The bucket is a GCRA in the database: a new bucket is full, takes are
// capped at what it holds, and an empty one says how long until a token.
func TestTakeTokens(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := newStore[int](t, e)
	bind(t, s, "gcra", queuetest.NewFakeClock(time.Now()))
	got, _, err := s.TakeTokens(bg, 1, 10, 4)
	require.NoError(t, err)
	assert.Equal(t, 4, got)
	got, _, err = s.TakeTokens(bg, 1, 10, 10)
	require.NoError(t, err)
	assert.InDelta(t, 6, got, 1, "the rest of the burst (and perhaps a token refilled meanwhile)")
	got, wait, err := s.TakeTokens(bg, 1, 10, 1)
	require.NoError(t, err)
	if got == 0 {
		assert.Greater(t, wait, time.Duration(0))
		assert.LessOrEqual(t, wait, time.Second, "a token a second")
	}
	_, _, err = s.TakeTokens(bg, 0, 10, 1)
	assert.ErrorContains(t, err, "perSecond")
	_, _, err = s.TakeTokens(bg, 1, 0, 1)
	assert.ErrorContains(t, err, "burst 0")
}

// Every started process of a queue counts the others through their
// presence rows; a closed one leaves at once.
func TestFleetProcesses(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := newStore[int](t, e, pgstore.WithPollInterval(20*time.Millisecond), pgstore.WithWorkerID("a"))
	b := newStore[int](t, e, pgstore.WithPollInterval(20*time.Millisecond), pgstore.WithWorkerID("b"))
	clk := queuetest.NewFakeClock(time.Now())
	bind(t, a, "procs", clk)
	bind(t, b, "procs", clk)
	require.Eventually(t, func() bool { return a.Processes() == 2 && b.Processes() == 2 }, 10*time.Second, pollTick)
	ctx, cancel := context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	require.NoError(t, b.Close(ctx))
	require.Eventually(t, func() bool { return a.Processes() == 1 }, 10*time.Second, pollTick)
}

// A job EnqueueTx inserted is counted as enqueued once its transaction
// commits, and never when it rolls back.
func TestEnqueueTxCountedAtCommit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := newStore[int](t, e)
	release := make(chan struct{})
	q, err := queue.NewWithStore(s, func(ctx context.Context, _ queue.Job[int]) error {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}, queue.WithName("txq"), queue.WithLogger(quietLogger()))
	require.NoError(t, err)
	require.NoError(t, q.Start(bg))
	t.Cleanup(func() { close(release); _ = q.Shutdown(bg) })

	tx, err := e.pool.Begin(bg)
	require.NoError(t, err)
	_, err = s.EnqueueTx(bg, tx, queue.Job[int]{Payload: 1})
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(bg))

	tx, err = e.pool.Begin(bg)
	require.NoError(t, err)
	_, err = s.EnqueueTx(bg, tx, queue.Job[int]{Payload: 2, Key: "k"})
	require.NoError(t, err)
	assert.Zero(t, q.Stats().Enqueued, "not before the commit")
	require.NoError(t, tx.Commit(bg))
	require.Eventually(t, func() bool { return q.Stats().Enqueued == 1 }, 10*time.Second, pollTick, "counted after the commit")
	// The rolled back job stays uncounted: a later committed one is counted alone.
	require.NoError(t, pgx.BeginFunc(bg, e.pool, func(tx pgx.Tx) error {
		_, err := s.EnqueueTx(bg, tx, queue.Job[int]{Payload: 3})
		return err
	}))
	require.Eventually(t, func() bool { return q.Stats().Enqueued == 2 }, 10*time.Second, pollTick)
}
