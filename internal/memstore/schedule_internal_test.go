package memstore

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTiersMatchSlice drives the heap's block array and a plain slice
// through the same pushes and pops, across several block edges and back.
func TestTiersMatchSlice(t *testing.T) {
	var tr tiers[int]
	var want []int64
	rng := rand.New(rand.NewPCG(1, 2))
	check := func() {
		t.Helper()
		require.Equal(t, len(want), tr.len())
		for i, id := range want {
			require.Equal(t, id, tr.at(i).id, "item %d", i)
		}
	}
	id := int64(0)
	for round := range 6 {
		grow := 1 + rng.IntN(3000)
		for range grow {
			id++
			tr.push(item[int]{id: id, payload: int(id)})
			want = append(want, id)
		}
		check()
		shrink := rng.IntN(len(want) + 1)
		if round == 5 {
			shrink = len(want)
		}
		for range shrink {
			it := tr.pop()
			require.Equal(t, want[len(want)-1], it.id)
			want = want[:len(want)-1]
		}
		check()
		// Blocks above the one in use and the one below it are freed.
		require.LessOrEqual(t, len(tr.blocks), blocksFor(len(want))+1, "round %d", round)
	}
	require.Zero(t, tr.len())
	require.LessOrEqual(t, len(tr.blocks), 1)
}

// blocksFor returns how many blocks hold n items.
func blocksFor(n int) int {
	k, held := 0, 0
	for held < n {
		held += 1 << (k + tierBits)
		k++
	}
	return k
}

func TestScheduleHeapOrder(t *testing.T) {
	s := newSchedule[int]()
	rng := rand.New(rand.NewPCG(3, 4))
	const n = 5000
	for i := range n {
		s.push(item[int]{id: int64(i + 1), at: int64(1 + rng.IntN(100))}, false)
	}
	var buf []item[int]
	buf, next := s.popDue(1<<62, buf, n)
	require.Len(t, buf, n)
	require.Zero(t, next)
	for i := 1; i < n; i++ {
		a, b := buf[i-1], buf[i]
		require.True(t, a.at < b.at || (a.at == b.at && a.id < b.id), "out of order at %d: %+v then %+v", i, a, b)
	}
	require.Zero(t, s.len())
}
