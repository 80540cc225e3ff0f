package admin

import "time"

// RunTimes is a sample of how long a queue's handlers ran, from the
// workers of the process whose Queue made the Admin: they time the runs
// of one job ID in 256, and each worker its first run after a refresh of
// the queue's coarse clock (every scale interval, and every call of
// RunTimes, Counts or a listing of running jobs), so that a dashboard
// polling it has fresh samples at any throughput while a queue of short
// jobs pays two clock reads per 256 runs. Runs are picked by ID and by
// when they start, never by how long they run, so Total/Runs estimates
// the mean run time without bias; Longest is the longest run sampled,
// not necessarily the longest run.
type RunTimes struct {
	// Runs is how many runs were timed since the queue's first Admin
	// call.
	Runs uint64
	// Total is their summed run time.
	Total time.Duration
	// Longest is the longest run timed since the previous call of
	// RunTimes (a second caller takes what the first left).
	Longest time.Duration
}

// RunTimer is an admin backend that times its queue's runs. The Admin of
// a Queue implements it; a store's own backend given to New (queuectl's)
// runs no jobs and does not.
type RunTimer interface {
	// RunTimes returns the run times sampled so far.
	RunTimes() RunTimes
}

// RunTimes returns a sample of the run times of the queue's jobs (see
// RunTimes), and false when the backend runs no jobs (New over a store's
// own backend).
func (a *Admin) RunTimes() (RunTimes, bool) {
	rt, ok := a.s.(RunTimer)
	if !ok {
		return RunTimes{}, false
	}
	return rt.RunTimes(), true
}
