package queue

import "github.com/prometheus/client_golang/prometheus"

// Collector exposes a queue's collector, without the queue label its
// registerer adds, to testutil.CollectAndCompare and CollectAndLint.
func Collector[T any](q *Queue[T]) prometheus.Collector {
	if q.obs.prom == nil {
		return nil
	}
	return q.obs.prom
}
