package queue

import "math/bits"

// atOrAbove reports whether depth ready jobs fill at least pct percent of
// capacity, depth·100 >= pct·capacity, the test behind admission (Admit),
// throttling (Fanout) and scaling (scale). The products are taken in 128
// bits: a durable store accepts any capacity, and math.MaxInt (no bound)
// times a percentage wraps an int. Negative arguments count as 0.
func atOrAbove(depth, capacity, pct int) bool {
	hi, lo := bits.Mul64(uint64(max(depth, 0)), 100)
	thi, tlo := bits.Mul64(uint64(max(pct, 0)), uint64(max(capacity, 0)))
	return hi > thi || hi == thi && lo >= tlo
}
