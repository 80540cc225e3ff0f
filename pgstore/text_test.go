package pgstore_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/pgstore"
	"github.com/queuekit/queue/queuetest"
	"github.com/stretchr/testify/require"
)

// TestRefusedErrorTextFallsBack: an outcome whose error text the database
// refuses (here a NUL byte, written without the escaping Dead does) is
// written with a plain text in its place, rather than failing and
// leaving the job leased, to be rescued and run again.
func TestRefusedErrorTextFallsBack(t *testing.T) {
	e := newEnv(t)
	s := newStore[P](t, e)
	bind(t, s, "refused", queuetest.NewFakeClock(epoch))
	ctx := context.Background()
	_, err := s.Add(ctx, queue.Job[P]{Key: "k"})
	require.NoError(t, err)
	j := claimWithin(t, s, 5*time.Second)
	require.NoError(t, pgstore.DeadRawText(s, ctx, j, "upstream said: a\x00b"))
	var state, last string
	require.NoError(t, e.pool.QueryRow(ctx, `SELECT state, last_error FROM `+e.schema+`.queuekit_jobs WHERE id = $1`, j.ID).
		Scan(&state, &last))
	require.Equal(t, "dead", state)
	require.Equal(t, "upstream said: a?b (pgstore: the full error text was refused by the database: SQLSTATE 22021)", last)
}

// TestPeriodicRunAtIsThePeriod: a periodic run without jitter, enqueued at
// its period's time (not in the future), reaches its handler with RunAt
// the period, as the documentation says, not zero.
func TestPeriodicRunAtIsThePeriod(t *testing.T) {
	e := newEnv(t)
	got := make(chan queue.Job[int], 10)
	q, err := queue.NewWithStore(newStore[int](t, e), func(_ context.Context, j queue.Job[int]) error {
		got <- j
		return nil
	}, queue.WithName("periodic_runat"))
	require.NoError(t, err)
	require.NoError(t, q.Periodic("tick", queue.Every(time.Second), queue.Job[int]{}, queue.PeriodicOptions{RunAtStart: true}))
	require.NoError(t, q.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = q.Shutdown(ctx)
	})
	for range 2 {
		select {
		case j := <-got:
			require.False(t, j.RunAt.IsZero(), "RunAt of periodic run %s", j.Key)
			require.Equal(t, "periodic:tick:"+strconv.FormatInt(j.RunAt.Unix(), 10), j.Key, "RunAt is the period")
		case <-time.After(30 * time.Second):
			t.Fatal("no periodic run within 30 s")
		}
	}
}

// TestEnqueueManyKeepsRunAt: EnqueueMany keeps a RunAt that is not in the
// future for the handler, as Add does, on each of its insert paths (COPY
// or an insert from arrays for jobs without key, a statement for keyed
// ones).
func TestEnqueueManyKeepsRunAt(t *testing.T) {
	e := newEnv(t)
	s := newStore[P](t, e)
	clk := queuetest.NewFakeClock(epoch)
	bind(t, s, "many_runat", clk)
	past := epoch.Add(-time.Hour)
	for _, key := range []string{"", "copy", "k"} {
		if key == "copy" {
			pgstore.SetCopyMin(s, 1)
			key = ""
		}
		added, err := s.EnqueueMany(context.Background(), []queue.Job[P]{{Key: key, RunAt: past}, {}})
		require.NoError(t, err)
		require.Len(t, added, 2)
		for range 2 {
			j := claimWithin(t, s, 5*time.Second)
			want := time.Time{}
			if j.ID == added[0].ID {
				want = past
			}
			require.True(t, j.RunAt.Equal(want), "key %q: job %d RunAt %v, want %v", key, j.ID, j.RunAt, want)
			require.NoError(t, s.Complete(context.Background(), j))
		}
	}
}

// TestEnqueueManyOddKeys: EnqueueMany keeps keys and groups of any bytes
// and length as Add does, windows included: a key given twice is
// inserted once, and each job's key comes back as it was given.
func TestEnqueueManyOddKeys(t *testing.T) {
	e := newEnv(t)
	s := newStore[P](t, e)
	bind(t, s, "many_keys", queuetest.NewFakeClock(epoch))
	long := strings.Repeat("0123456789abcdef", 200) // 3 200 bytes
	keys := []string{long + "a", long + "b", "a\x00b", "a\xffb", "#sha256:plain"}
	for _, window := range []time.Duration{0, time.Hour} {
		jobs := []queue.Job[P]{}
		for i, k := range keys {
			jobs = append(jobs, queue.Job[P]{Key: k, Group: k, UniqueFor: window, Payload: P{N: i}})
		}
		jobs = append(jobs, queue.Job[P]{Key: keys[0], UniqueFor: window, Payload: P{N: 0}})
		added, err := s.EnqueueMany(context.Background(), jobs)
		require.NoError(t, err)
		require.Zero(t, added[len(keys)].ID, "window %v: the second job with key 0 is skipped", window)
		for range keys {
			j := claimWithin(t, s, 5*time.Second)
			require.Equal(t, keys[j.Payload.N], j.Key)
			require.Equal(t, keys[j.Payload.N], j.Group)
			require.NoError(t, s.Complete(context.Background(), j))
		}
	}
	// The windows stand.
	_, err := s.Add(context.Background(), queue.Job[P]{Key: keys[0]})
	require.ErrorIs(t, err, queue.ErrDuplicate)
	_, err = s.Add(context.Background(), queue.Job[P]{Key: keys[2]})
	require.ErrorIs(t, err, queue.ErrDuplicate)
}

// TestBadTargetRefused: a Target that is not a valid name is refused with
// queue.ErrInvalidJob naming the rule, not with the database's error.
func TestBadTargetRefused(t *testing.T) {
	e := newEnv(t)
	s := newStore[P](t, e)
	bind(t, s, "bad_target", queuetest.NewFakeClock(epoch))
	for _, target := range []string{"api\x00", "api\xff", strings.Repeat("t", 1025)} {
		_, err := s.Add(context.Background(), queue.Job[P]{Target: target})
		require.ErrorIs(t, err, queue.ErrInvalidJob, "Add, target %.20q", target)
		require.Contains(t, err.Error(), "Target")
		_, err = s.EnqueueMany(context.Background(), []queue.Job[P]{{}, {Target: target}})
		require.ErrorIs(t, err, queue.ErrInvalidJob, "EnqueueMany, target %.20q", target)
	}
}
