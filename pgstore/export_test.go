package pgstore

import (
	"context"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/admin"
)

// HotSQL returns the statements that run on every claim, promotion and
// rescue, for EXPLAIN.
func HotSQL[T any](s *Store[T]) (claim, promote, rescue string) {
	return s.q.fetchClaim, s.q.promote, s.q.rescue
}

// OutcomeSQL returns the statements that end runs and extend leases by
// job ID, for EXPLAIN.
func OutcomeSQL[T any](s *Store[T]) (complete, heartbeat string) {
	return s.q.complete, s.q.heartbeat
}

// ClaimFromSQL returns the claims that read the claim index from a start
// key (claimHint): strict, and weighted (its strict branch).
func ClaimFromSQL[T any](s *Store[T]) (strict, weighted string) {
	return s.q.fetchClaimFrom, s.q.fetchClaimWeightedFrom
}

// WeightedClaimSQL returns the claim statement under weighted dispatch.
func WeightedClaimSQL[T any](s *Store[T]) string { return s.q.fetchClaimWeighted }

// GenericPlansSQL is sqlGenericPlans, which the fetcher's claim batch
// and every write batch send first.
const GenericPlansSQL = sqlGenericPlans

// FetchClaimSQL returns the fetcher's claim statements, strict and
// weighted: HotSQL's claim and WeightedClaimSQL committing without
// waiting for the WAL flush.
func FetchClaimSQL[T any](s *Store[T]) (strict, weighted string) {
	return s.q.fetchClaim, s.q.fetchClaimWeighted
}

// IsClaimSQL reports whether sql is one of s's claim statements: a write
// batch's or the fetcher's, strict or weighted.
func IsClaimSQL[T any](s *Store[T], sql string) bool {
	switch sql {
	case s.q.fetchClaim, s.q.fetchClaimWeighted, s.q.fetchClaimFrom, s.q.fetchClaimWeightedFrom:
		return true
	}
	return false
}

// NextDueSQL returns the statement that reads a queue's next due time.
func NextDueSQL[T any](s *Store[T]) string { return s.q.nextDue }

// FetchSettled reports whether s listens, its last claim found nothing
// and no wake-up of its fetcher is pending: it claims again only when
// woken.
func FetchSettled[T any](s *Store[T]) bool {
	return s.listening.Load() && s.dry.dry() && len(s.wakeFetch) == 0
}

// AheadClaimed reports whether no claim for workers expected back from
// an outcome (expectClaims) is pending or running: once true after an
// outcome returned, the fetcher has claimed that worker's next job, or
// found none, or dropped the claim on a dry queue.
func AheadClaimed[T any](s *Store[T]) bool {
	s.handMu.Lock()
	defer s.handMu.Unlock()
	return s.expect.Load() == 0 && s.claiming == 0 && len(s.wantFetch) == 0
}

// DeadRawText ends a claimed job as dead with text as its error, as Dead
// does but without escaping text first: a text the database refuses, to
// test the writer's fallback.
func DeadRawText[T any](s *Store[T], ctx context.Context, job queue.Job[T], text string) error {
	return s.outcome(ctx, &op{kind: opDead, id: job.ID, attempt: job.Attempt, key: job.Key, err: text})
}

// ListSQL returns the admin List statement and arguments for f (a
// bounded walk when f is filtered), for EXPLAIN.
func ListSQL[T any](s *Store[T], f admin.Filter, oldest bool, after *admin.Cursor, limit int) (string, []any) {
	sql, args, _ := s.listSQL(f, oldest, after, limit, false)
	return sql, args
}

// SetCopyMin sets the least batch EnqueueMany writes with COPY (n = 1:
// every batch without keys), while no EnqueueMany of s runs.
func SetCopyMin[T any](s *Store[T], n int) { s.copyMin = n }
