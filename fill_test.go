package queue

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestAtOrAbove(t *testing.T) {
	for _, tc := range []struct {
		depth, capacity, pct int
		want                 bool
	}{
		{0, 10, 60, false},
		{5, 10, 60, false},
		{6, 10, 60, true},
		{10, 10, 100, true},
		{9, 10, 100, false},
		{0, 10, 0, true},
		{0, 1, 1, false},
		{1, 1, 1, true},
		// pct·capacity wraps an int here; the comparison must not.
		{0, math.MaxInt, 60, false},
		{0, math.MaxInt, 100, false},
		{1 << 40, math.MaxInt, 1, false},
		{math.MaxInt, math.MaxInt, 100, true},
		{math.MaxInt, math.MaxInt, 1, true},
		{math.MaxInt - 1, math.MaxInt, 100, false},
		{math.MaxInt / 100, math.MaxInt, 1, false},  // 100·depth = MaxInt-7
		{math.MaxInt/100 + 1, math.MaxInt, 1, true}, // 100·depth wraps an int
		{math.MaxInt/2 + 1, math.MaxInt, 50, true},  // just over half
		{math.MaxInt / 2, math.MaxInt, 50, false},   // just under half
		{-1, 10, 60, false},                         // negative counts as 0
	} {
		assert.Equal(t, tc.want, atOrAbove(tc.depth, tc.capacity, tc.pct), "atOrAbove(%d, %d, %d)", tc.depth, tc.capacity, tc.pct)
	}
}
