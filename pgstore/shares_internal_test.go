package pgstore

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/storekit"
)

// TestPassesLast: the weighted claim's $9 is the priority the last claim
// took all its jobs from; a claim that took from several, or none, leaves
// it. One configured priority, or priorities without shares, claim
// strictly (no passes).
func TestPassesLast(t *testing.T) {
	cfg := storekit.Config{Priorities: []queue.Priority{
		{Name: "high", Weight: 0, Share: 6}, {Name: "normal", Weight: 5, Share: 3}, {Name: "low", Weight: 10, Share: 1}}}
	w := newPasses(&cfg)
	require.NotNil(t, w)
	last := func() int32 { _, _, _, l := w.args(); return l }
	require.Equal(t, int32(0), last(), "first configured priority before any claim")
	w.advance([]int{5, 5, 5})
	require.Equal(t, int32(5), last())
	w.advance([]int{10, 5})
	require.Equal(t, int32(5), last(), "a mixed claim leaves it")
	w.advance(nil)
	require.Equal(t, int32(5), last(), "an empty claim leaves it")
	w.advance([]int{10})
	require.Equal(t, int32(10), last())

	one := storekit.Config{Priorities: []queue.Priority{{Name: "only", Weight: 0, Share: 1}}}
	require.Nil(t, newPasses(&one))
	strict := storekit.Config{Priorities: []queue.Priority{{Name: "a", Weight: 0}, {Name: "b", Weight: 1}}}
	require.Nil(t, newPasses(&strict))
}
