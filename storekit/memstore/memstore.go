// Package memstore is the in-memory store of package queue offered to
// store authors as a holding place: a durable store that keeps accepting
// jobs while its server is unreachable (redisstore's outage fallback)
// keeps them here, numbered by itself, claims them without waiting, and
// takes them out again to write them to its server.
//
// It is not a store to pass to queue.NewWithStore: a queue made with
// queue.New already uses the same in-memory store, and jobs put here
// are not seen by any queue. The methods are safe for concurrent use.
//
// # Stability
//
// Part of the v1 API of module github.com/queuekit/queue, for store
// authors: the methods below keep their meanings within major version 1.
package memstore

import (
	"context"
	"time"

	"github.com/queuekit/queue/internal/memstore"
	"github.com/queuekit/queue/queuetype"
	"github.com/queuekit/queue/storekit"
)

// MaxID is the largest job ID Put and Restore accept.
const MaxID = memstore.MaxID

// MaxCapacity is the largest Config.Capacity Init accepts.
const MaxCapacity = memstore.MaxCapacity

// Store holds jobs in memory under the rules of package queue's
// in-memory store: priorities, pending keys, the schedule, coalescing.
type Store[T any] struct {
	s *memstore.Store[T]
}

// New returns an empty Store. Init must be called before any other
// method.
func New[T any]() *Store[T] { return &Store[T]{s: memstore.New[T]()} }

// Init configures the store (capacity, priorities, clock, coalescing);
// it fails with a *queuetype.OptionError for a configuration the store
// cannot hold.
func (m *Store[T]) Init(cfg storekit.Config) error { return m.s.Init(cfg) }

// Put accepts a job that keeps its ID, which must be in 1..MaxID and not
// that of another job the store holds or has held. parked counts jobs
// the caller holds elsewhere against Config.MaxPending. It fails as
// storekit.Store's Add does (ErrDuplicate, ErrQueueFull,
// ErrPendingLimit); on error nothing is stored.
func (m *Store[T]) Put(job queuetype.Job[T], parked int) (storekit.Added, error) {
	return m.s.Put(job, parked)
}

// TryClaim claims, without waiting, the oldest ready job of the highest
// priority with an index below below, or reports false. It does not
// promote due jobs: PromoteDue does.
func (m *Store[T]) TryClaim(below int) (queuetype.Job[T], bool) { return m.s.TryClaim(below) }

// Take removes and returns up to n waiting jobs of the priorities (by
// index) for which want reports true: ready jobs first, highest priority
// and oldest first, then scheduled ones. Their keys and groups are free
// at once; running jobs and coalesced reruns stay. Restore puts back a
// job that could not go where it was taken for.
func (m *Store[T]) Take(n int, want func(prio int) bool) []queuetype.Job[T] {
	return m.s.Take(n, want)
}

// Restore puts back a job that Take returned, as it was: with its ID,
// attempt and RunAt. It is refused for neither the capacity nor
// MaxPending; it returns a *queuetype.DuplicateError, and restores
// nothing, when another job holds the key.
func (m *Store[T]) Restore(job queuetype.Job[T]) error { return m.s.Restore(job) }

// Holds reports whether a job of the priorities (by index) for which
// want reports true waits ready or scheduled. It looks at every
// scheduled job.
func (m *Store[T]) Holds(want func(prio int) bool) bool { return m.s.Holds(want) }

// Pending returns the number of jobs held: ready, scheduled and
// coalesced reruns.
func (m *Store[T]) Pending() int { return m.s.Pending() }

// Len returns the number of ready jobs.
func (m *Store[T]) Len() int { return m.s.Len() }

// Complete ends a claimed job as done, as storekit.Store's Complete.
func (m *Store[T]) Complete(ctx context.Context, job queuetype.Job[T]) error {
	return m.s.Complete(ctx, job)
}

// Retry schedules a claimed job to run again at at, as storekit.Store's
// Retry.
func (m *Store[T]) Retry(ctx context.Context, job queuetype.Job[T], at time.Time, cause error) error {
	return m.s.Retry(ctx, job, at, cause)
}

// Defer puts a claimed job back to run at at without using an attempt,
// as storekit.Store's Defer.
func (m *Store[T]) Defer(ctx context.Context, job queuetype.Job[T], at time.Time, cause error) error {
	return m.s.Defer(ctx, job, at, cause)
}

// Cancel cancels the waiting job with key, as storekit.Store's Cancel.
func (m *Store[T]) Cancel(ctx context.Context, key string) (int, error) { return m.s.Cancel(ctx, key) }

// CancelMatch cancels every waiting job whose key satisfies match, as
// storekit.Store's CancelMatch.
func (m *Store[T]) CancelMatch(ctx context.Context, match func(key string) bool) (int, error) {
	return m.s.CancelMatch(ctx, match)
}

// PromoteDue moves due scheduled jobs to the ready queues, as
// storekit.Store's PromoteDue.
func (m *Store[T]) PromoteDue(ctx context.Context) (int, error) { return m.s.PromoteDue(ctx) }

// Purge removes every waiting job, as storekit.Store's Purge.
func (m *Store[T]) Purge(ctx context.Context) (int, error) { return m.s.Purge(ctx) }

// Stats returns a snapshot of the store's contents.
func (m *Store[T]) Stats(ctx context.Context) (storekit.Stats, error) { return m.s.Stats(ctx) }

// Scheduled returns up to n scheduled jobs, earliest first.
func (m *Store[T]) Scheduled(ctx context.Context, n int) ([]queuetype.ScheduledJob, error) {
	return m.s.Scheduled(ctx, n)
}
