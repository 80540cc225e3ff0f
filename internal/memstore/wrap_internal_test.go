package memstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue/queuetype"
)

func all(int) bool { return true }

// TestPutKeepsTheCallersIDs: Put numbers a job with the caller's ID, which
// the key set and the claim carry, and refuses an ID out of range.
func TestPutKeepsTheCallersIDs(t *testing.T) {
	s, _ := newTestStore(t, 10)
	ctx := context.Background()
	a, err := s.Put(queuetype.Job[int]{ID: MaxID, Key: "k", Payload: 1}, 0)
	require.NoError(t, err)
	assert.Equal(t, int64(MaxID), a.ID)
	_, err = s.Put(queuetype.Job[int]{ID: 7, Key: "k"}, 0)
	require.ErrorIs(t, err, queuetype.ErrDuplicate)
	j := claimNow(t, s)
	assert.Equal(t, int64(MaxID), j.ID)
	assert.Equal(t, 1, j.Attempt)
	require.NoError(t, s.Complete(ctx, j))
	_, err = s.Put(queuetype.Job[int]{ID: 7, Key: "k"}, 0)
	require.NoError(t, err, "the key is free once its job completed")
	for _, id := range []int64{0, -1, MaxID + 1} {
		_, err := s.Put(queuetype.Job[int]{ID: id}, 0)
		assert.Error(t, err, "ID %d", id)
	}
	// parked jobs count against MaxPending, as in AddJob.
	s.cfg.MaxPending = 3
	_, err = s.Put(queuetype.Job[int]{ID: 8}, 1)
	require.NoError(t, err)
	_, err = s.Put(queuetype.Job[int]{ID: 9}, 1)
	require.ErrorIs(t, err, queuetype.ErrPendingLimit)
}

// TestTryClaimBelow: TryClaim never waits, and claims only among the
// priorities below the bound, highest first.
func TestTryClaimBelow(t *testing.T) {
	s, _ := newTestStore(t, 10)
	_, ok := s.TryClaim(3)
	require.False(t, ok)
	for i, p := range []string{"low", "normal", "high", "normal"} {
		_, err := s.Put(queuetype.Job[int]{ID: int64(10 + i), Priority: p, Payload: i}, 0)
		require.NoError(t, err)
	}
	_, ok = s.TryClaim(0)
	require.False(t, ok, "no priority below 0")
	var got []int
	for {
		j, ok := s.TryClaim(2) // high and normal
		if !ok {
			break
		}
		assert.Equal(t, 1, j.Attempt)
		got = append(got, j.Payload)
	}
	assert.Equal(t, []int{2, 1, 3}, got)
	j, ok := s.TryClaim(3)
	require.True(t, ok)
	assert.Equal(t, 0, j.Payload)
	st, err := s.Stats(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 4, st.Running)
}

// TestTakeAndRestore: Take removes waiting jobs of the wanted priorities,
// ready ones in claim order and then scheduled ones, freeing their keys
// and groups and leaving running jobs and reruns; Restore puts a job back
// with its ID, attempt and due time.
func TestTakeAndRestore(t *testing.T) {
	s, clk := newTestStore(t, 10)
	ctx := context.Background()
	later := clk.Now().Add(time.Hour)
	put := func(j queuetype.Job[int]) {
		t.Helper()
		_, err := s.Put(j, 0)
		require.NoError(t, err)
	}
	put(queuetype.Job[int]{ID: 1, Key: "run", Payload: 1})
	run := claimNow(t, s)
	_, err := s.Put(queuetype.Job[int]{ID: 100, Key: "run", Payload: 2}, 0) // a rerun: stays
	require.NoError(t, err)
	put(queuetype.Job[int]{ID: 2, Key: "a", Priority: "low", Payload: 3})
	put(queuetype.Job[int]{ID: 3, Payload: 4})
	put(queuetype.Job[int]{ID: 4, Key: "b", Payload: 5})
	put(queuetype.Job[int]{ID: 5, Key: "s", Group: "g", RunAt: later, Payload: 6})
	put(queuetype.Job[int]{ID: 6, Group: "h", RunAt: later, Priority: "high", Payload: 7})
	put(queuetype.Job[int]{ID: 7, Key: "c", Payload: 8})
	n, err := s.Cancel(ctx, "c") // cancelled: skipped
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.True(t, s.Holds(all))

	got := s.Take(2, func(p int) bool { return p > 0 })
	require.Len(t, got, 2)
	assert.Equal(t, []int{4, 5}, []int{got[0].Payload, got[1].Payload}, "normal's ready jobs, oldest first")
	assert.Equal(t, int64(4), got[1].ID)
	assert.Equal(t, "b", got[1].Key)
	got = append(got, s.Take(10, func(p int) bool { return p > 0 })...)
	require.Len(t, got, 4)
	assert.Equal(t, []int{3, 6}, []int{got[2].Payload, got[3].Payload}, "then low's, then the scheduled")
	assert.Equal(t, "g", got[3].Group)
	assert.True(t, got[3].RunAt.Equal(later))
	assert.False(t, s.Holds(func(p int) bool { return p > 0 }))
	assert.True(t, s.Holds(func(p int) bool { return p == 0 }), "the high job is not taken")
	assert.Equal(t, 2, s.Pending(), "the high job and the rerun")

	// Their keys and groups are free.
	for i, k := range []string{"a", "b", "s"} {
		_, err := s.Put(queuetype.Job[int]{ID: int64(200 + i), Key: k}, 0)
		require.NoError(t, err, k)
		_, err = s.Cancel(ctx, k)
		require.NoError(t, err)
	}
	_, err = s.Put(queuetype.Job[int]{ID: 300, Key: "g2", Group: "g", RunAt: later}, 0)
	require.NoError(t, err, "the taken job's group is free")

	// Restore: a due job goes back to its ready queue with its attempt;
	// the scheduled one to the schedule, without taking its group back.
	b := got[1]
	b.Attempt = 2
	require.NoError(t, s.Restore(b))
	require.NoError(t, s.Restore(got[3]))
	_, err = s.Put(queuetype.Job[int]{ID: 301, Key: "b"}, 0)
	require.ErrorIs(t, err, queuetype.ErrDuplicate, "a restored job holds its key")
	sched, err := s.Scheduled(ctx, 10)
	require.NoError(t, err)
	assert.Contains(t, sched, queuetype.ScheduledJob{ID: 5, Key: "s", Group: "g", Priority: "normal", RunAt: later})
	j, ok := s.TryClaim(3)
	require.True(t, ok)
	assert.Equal(t, 5, j.Payload)
	assert.Equal(t, int64(4), j.ID)
	assert.Equal(t, 3, j.Attempt)
	require.NoError(t, s.Complete(ctx, j))
	require.NoError(t, s.Complete(ctx, run))
}

// TestRestoreWhenFull: a due job restored into a full ready queue waits in
// the schedule, RequeueDelay later, rather than being refused; a job whose
// key another job holds is refused.
func TestRestoreWhenFull(t *testing.T) {
	s, clk := newTestStore(t, 1)
	ctx := context.Background()
	_, err := s.Put(queuetype.Job[int]{ID: 1, Key: "k"}, 0)
	require.NoError(t, err)
	taken := s.Take(1, all)
	require.Len(t, taken, 1)
	_, err = s.Put(queuetype.Job[int]{ID: 2}, 0)
	require.NoError(t, err)
	require.NoError(t, s.Restore(taken[0]))
	assert.Equal(t, 1, s.Len())
	sched, err := s.Scheduled(ctx, 1)
	require.NoError(t, err)
	require.Len(t, sched, 1)
	assert.Equal(t, int64(1), sched[0].ID)
	assert.True(t, sched[0].RunAt.Equal(clk.Now().Add(10*time.Second)), "RunAt %v", sched[0].RunAt)

	dup := taken[0]
	dup.ID = 3
	var de *queuetype.DuplicateError
	require.True(t, errors.As(s.Restore(dup), &de))
	require.Error(t, s.Restore(queuetype.Job[int]{}))
}

// TestTakenScheduledJobRestoredRunsOnce: a keyed scheduled job taken and
// restored under its own ID leaves no stale item in the schedule that
// its key's entry would take for it: it runs once.
func TestTakenScheduledJobRestoredRunsOnce(t *testing.T) {
	s, clk := newTestStore(t, 10)
	ctx := context.Background()
	_, err := s.Put(queuetype.Job[int]{ID: 1, Key: "k", RunAt: clk.Now().Add(time.Minute)}, 0)
	require.NoError(t, err)
	taken := s.Take(1, all)
	require.Len(t, taken, 1)
	require.NoError(t, s.Restore(taken[0]))
	clk.advance(time.Minute)
	n, err := s.PromoteDue(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	_, ok := s.TryClaim(3)
	require.True(t, ok)
	_, ok = s.TryClaim(3)
	require.False(t, ok, "a second copy of the job ran")
	assert.Equal(t, 0, s.Pending())
}
