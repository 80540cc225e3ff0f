package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/queuetest"
	"github.com/queuekit/queue/storekit"
)

// The fleet's admission bucket in these tests: burst 100 at a negligible
// rate, leased in fives (the queue's Burst/20).
const (
	fleetBurst = 100
	fleetLease = 5
)

// admitHelper is the "admit" helper process: a queue "q" whose one worker
// holds a job, so that the queue is past its 1 % admission threshold with
// the jobs the parent added. Once it sees them (the fleet refresh at
// Start: it has added and claimed nothing itself) it prints ready, waits
// for a token on the go list, calls Admit 300 times and pushes how many
// were admitted to the admitted list.
func admitHelper(t *testing.T, c *redis.Client, s *Store[int], tag string) {
	ctx := context.Background()
	hold := func(ctx context.Context, _ queue.Job[int]) error { <-ctx.Done(); return ctx.Err() }
	q, err := queue.NewWithStore(s, hold, queue.WithName("q"), queue.WithWorkers(1, 1), queue.WithCapacity(100, 0),
		queue.WithRateLimit(queue.RateLimit{FillPct: 1, PerSecond: 1e-3, Burst: fleetBurst}), queue.WithLogger(quietLogger()))
	require.NoError(t, err)
	require.NoError(t, q.Start(ctx))
	require.Eventually(t, func() bool { return q.Stats().Depth > 0 }, 20*time.Second, pollTick, "the fill was never seen")
	fmt.Println("ready", s.owner)
	require.NoError(t, c.BLPop(ctx, time.Minute, tag+":test:go").Err())
	n := 0
	for range 300 {
		if q.Admit() == nil {
			n++
		}
	}
	require.NoError(t, c.RPush(ctx, tag+":test:admitted", n).Err())
	select {}
}

// TestFleetAdmissionOneBucket: two processes on one queue, both past the
// fill threshold, admit one bucket's worth between them (within the bound
// of processes × lease), not one each.
func TestFleetAdmissionOneBucket(t *testing.T) {
	c := needRedis(t)
	t.Parallel()
	prefix := testPrefix(t, c)
	tag := "{" + prefix + ":q}"
	s := openStoreCfg(t, c, nil, func(cfg *storekit.Config) { cfg.Name = "q" }, WithPrefix(prefix))
	for i := range 50 {
		_, err := s.Add(context.Background(), queue.Job[int]{Payload: i})
		require.NoError(t, err)
	}
	for range 2 {
		startHelper(t, "admit", prefix, 10*time.Second)
	}
	require.NoError(t, c.RPush(context.Background(), tag+":test:go", 1, 1).Err())
	total := 0
	for _, v := range popN(t, c, tag+":test:admitted", 2, 30*time.Second) {
		n, err := strconv.Atoi(v)
		require.NoError(t, err)
		total += n
	}
	t.Logf("admitted %d of a burst of %d", total, fleetBurst)
	assert.LessOrEqual(t, total, fleetBurst, "the bucket is taken in leases: never more than it holds")
	assert.GreaterOrEqual(t, total, fleetBurst-2*fleetLease, "at most a lease per process left unspent")
}

// The bucket is a GCRA on Redis's clock: a new bucket is full, takes are
// capped at what it holds, and an empty one says how long until a token.
func TestTakeTokens(t *testing.T) {
	c := needRedis(t)
	t.Parallel()
	s := openStore(t, c, queuetest.NewFakeClock(time.Now()), WithPrefix(testPrefix(t, c)))
	got, _, err := s.TakeTokens(context.Background(), 1, 10, 4)
	require.NoError(t, err)
	assert.Equal(t, 4, got)
	got, _, err = s.TakeTokens(context.Background(), 1, 10, 10)
	require.NoError(t, err)
	assert.InDelta(t, 6, got, 1, "the rest of the burst (and perhaps a token refilled meanwhile)")
	got, wait, err := s.TakeTokens(context.Background(), 1, 10, 1)
	require.NoError(t, err)
	if got == 0 {
		assert.Greater(t, wait, time.Duration(0))
		assert.LessOrEqual(t, wait, time.Second, "a token a second")
	}
	_, _, err = s.TakeTokens(context.Background(), 0, 10, 1)
	assert.ErrorContains(t, err, "perSecond")
	_, _, err = s.TakeTokens(context.Background(), 1, 0, 1)
	assert.ErrorContains(t, err, "burst 0")
}

// Every started process counts the others through the presence set, and
// sees the queue's fill before it has added or claimed anything; a closed
// one leaves at once.
func TestFleetProcessesAndFill(t *testing.T) {
	c := needRedis(t)
	t.Parallel()
	prefix := testPrefix(t, c)
	a := openStore(t, c, nil, WithPrefix(prefix), WithPollInterval(20*time.Millisecond), WithWorkerID("a"))
	for i := range 3 {
		_, err := a.Add(context.Background(), queue.Job[int]{Payload: i})
		require.NoError(t, err)
	}
	b := openStore(t, c, nil, WithPrefix(prefix), WithPollInterval(20*time.Millisecond), WithWorkerID("b"))
	require.Eventually(t, func() bool { return a.Processes() == 2 && b.Processes() == 2 }, 10*time.Second, pollTick)
	assert.Equal(t, 3, b.Len(), "b has not added or claimed, and sees the fill")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, b.Close(ctx))
	require.Eventually(t, func() bool { return a.Processes() == 1 }, 10*time.Second, pollTick)
}
