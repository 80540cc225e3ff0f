package storekit

// ShareCycle returns the weighted dispatch order of levels with the given
// shares: a sequence of level indices in which level i appears shares[i]/g
// times (g the shares' greatest common divisor), spread out by smooth
// weighted round-robin (nginx's), ties to the lower index. A store walks
// it with a per-process counter, preferring at each claim the level the
// cycle names and falling back to the others in priority order when that
// level has no ready job: over any window of len(cycle) claims with every
// level ready, level i gets exactly its share, and a level with ready jobs
// waits at most len(cycle) claims for its turn. Deterministic, so tests
// can count. Nil unless every share is positive.
func ShareCycle(shares []int) []uint8 {
	g := 0
	for _, s := range shares {
		if s <= 0 {
			return nil
		}
		g = gcd(g, s)
	}
	if len(shares) == 0 {
		return nil
	}
	total := 0
	w := make([]int, len(shares))
	for i, s := range shares {
		w[i] = s / g
		total += w[i]
	}
	cur := make([]int, len(shares))
	out := make([]uint8, total)
	for n := range out {
		best := 0
		for i := range w {
			cur[i] += w[i]
			if cur[i] > cur[best] {
				best = i
			}
		}
		cur[best] -= total
		out[n] = uint8(best)
	}
	return out
}

// Shares returns the levels' shares, in order.
func (c *Config) Shares() []int {
	out := make([]int, len(c.Priorities))
	for i, p := range c.Priorities {
		out[i] = p.Share
	}
	return out
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
