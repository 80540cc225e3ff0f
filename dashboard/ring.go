package dashboard

import "time"

// The chart's history is a bounded ring of samples kept by the handler
// and taken when the page polls, at most one per interval. No goroutine
// samples in the background: nothing runs, and nothing costs the queue,
// while nobody watches, and there is nothing to stop. Every viewer shares
// the one ring, so a page opened late still shows the minutes others
// watched; a stretch nobody watched is drawn as a gap. History that must
// survive unwatched belongs in the queue's Prometheus metrics.

// sample is one reading of the queue.
type sample struct {
	at                      time.Time
	depth, running, workers int
	done, failed            uint64 // counters since New
	runs                    uint64 // runs the Recorder timed
	runNanos, maxNanos      int64  // their summed run time; the longest since the previous sample
	hasLatency              bool
}

// ring holds the latest len(buf)-capacity samples, oldest at start.
type ring struct {
	buf   []sample
	start int
}

func (r *ring) add(s sample) {
	if len(r.buf) < cap(r.buf) {
		r.buf = append(r.buf, s)
		return
	}
	r.buf[r.start] = s
	r.start = (r.start + 1) % len(r.buf)
}

func (r *ring) last() (sample, bool) {
	if len(r.buf) == 0 {
		return sample{}, false
	}
	return r.buf[(r.start+len(r.buf)-1)%len(r.buf)], true
}

// each calls fn with every sample, oldest first.
func (r *ring) each(fn func(s sample)) {
	for i := range r.buf {
		fn(r.buf[(r.start+i)%len(r.buf)])
	}
}

// point is one sample as the chart draws it. Rates are per second over
// the time since the previous sample; Gap marks a sample taken after a
// stretch nobody watched (more than three intervals), where the line
// breaks and the rates are averages over the gap.
type point struct {
	T            int64    `json:"t"` // Unix milliseconds
	Depth        int      `json:"depth"`
	Running      int      `json:"running"`
	Workers      int      `json:"workers"`
	Done         uint64   `json:"done"`       // jobs done since New
	Throughput   float64  `json:"throughput"` // jobs done per second
	Failures     float64  `json:"failures"`   // failed runs per second
	LatencyMs    *float64 `json:"latency_ms,omitempty"`
	LatencyMaxMs *float64 `json:"latency_max_ms,omitempty"`
	Gap          bool     `json:"gap,omitempty"`
}

// points turns the ring into the chart's points; the first sample, with
// nothing before it, has no rates.
func (r *ring) points(interval time.Duration) []point {
	out := make([]point, 0, len(r.buf))
	var prev sample
	first := true
	r.each(func(s sample) {
		p := point{T: s.at.UnixMilli(), Depth: s.depth, Running: s.running, Workers: s.workers, Done: s.done}
		if !first {
			dt := s.at.Sub(prev.at).Seconds()
			if dt > 0 {
				p.Throughput = float64(s.done-prev.done) / dt
				p.Failures = float64(s.failed-prev.failed) / dt
			}
			p.Gap = s.at.Sub(prev.at) > 3*interval
			if s.hasLatency {
				mx := float64(s.maxNanos) / 1e6
				p.LatencyMaxMs = &mx
				if n := s.runs - prev.runs; n > 0 {
					mean := float64(s.runNanos-prev.runNanos) / float64(n) / 1e6
					p.LatencyMs = &mean
				}
			}
		}
		prev, first = s, false
		out = append(out, p)
	})
	return out
}
