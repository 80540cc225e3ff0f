package memstore

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue/queuetype"
)

// TestUniqueMarksExpire: marks are swept once their windows end, by Stats
// and by the Adds that set new marks, so that a store that has seen many
// windows holds only the open ones (and no more than twice as many).
func TestUniqueMarksExpire(t *testing.T) {
	const n = 100_000
	s, clk := newTestStore(t, n)
	burst := func(prefix string) {
		for i := range n {
			if _, err := s.Add(context.Background(), queuetype.Job[int]{Key: prefix + strconv.Itoa(i), UniqueFor: time.Minute}); err != nil {
				t.Fatal(err)
			}
			if m := s.marks.Load(); m > 2*n {
				t.Fatalf("%d marks held, want at most %d", m, 2*n)
			}
		}
	}
	burst("a")
	require.EqualValues(t, n, s.marks.Load())
	_, err := s.Purge(context.Background())
	require.NoError(t, err)
	require.EqualValues(t, n, s.marks.Load(), "Purge leaves the windows")

	// Adds that set marks sweep the expired ones.
	clk.advance(time.Minute)
	burst("b")
	require.EqualValues(t, n, s.marks.Load(), "the first burst's marks, expired, are swept by the second's adds")
	_, err = s.Purge(context.Background())
	require.NoError(t, err)

	// Stats sweeps every shard, and the shards give their maps back.
	clk.advance(time.Minute)
	_, err = s.Stats(context.Background())
	require.NoError(t, err)
	require.Zero(t, s.marks.Load())
	for i := range s.keys.shards {
		sh := &s.keys.shards[i]
		sh.mu.Lock()
		require.False(t, sh.hasMarks(), "shard %d keeps a map of expired marks", i)
		sh.mu.Unlock()
	}
	// Every key is free again.
	_, err = s.Add(context.Background(), queuetype.Job[int]{Key: "a1", UniqueFor: time.Minute})
	require.NoError(t, err)
}

// TestUniqueMarkRenewed: a key whose window ended and was opened again
// keeps the new window when the old one's expiry surfaces.
func TestUniqueMarkRenewed(t *testing.T) {
	s, clk := newTestStore(t, 16)
	ctx := context.Background()
	other := sameShardKey(s.keys, "k")
	_, err := s.Add(ctx, queuetype.Job[int]{Key: "k", UniqueFor: time.Minute})
	require.NoError(t, err)
	_, err = s.Cancel(ctx, "k")
	require.NoError(t, err)
	clk.advance(time.Minute)
	_, err = s.Add(ctx, queuetype.Job[int]{Key: "k", UniqueFor: time.Hour})
	require.NoError(t, err, "the first window has ended")
	_, err = s.Cancel(ctx, "k")
	require.NoError(t, err)
	clk.advance(time.Minute)
	_, err = s.Add(ctx, queuetype.Job[int]{Key: other}) // drops the first window's expiry from the shard's heap
	require.NoError(t, err)
	_, err = s.Add(ctx, queuetype.Job[int]{Key: "k"})
	var dup *queuetype.DuplicateError
	require.True(t, errors.As(err, &dup), "Add within the second window = %v", err)
	require.Contains(t, err.Error(), "unique window")
	require.Same(t, err, func() error { _, err := s.Add(ctx, queuetype.Job[int]{Key: "k"}); return err }(), "repeated refusals share one error")
	require.EqualValues(t, 1, s.marks.Load())
}
