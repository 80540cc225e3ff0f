package pgstore

import (
	"slices"
	"sync"

	"github.com/queuekit/queue/storekit"
)

// sqlClaimWeighted is sqlClaim under weighted dispatch (every priority has
// a Share). Each priority offers its first $3 due available jobs in
// run_at, id order; its k-th job gets the virtual time pass + k × stride
// ($6 the priorities' weights, $7 their passes, $8 their strides: stride
// is inversely proportional to the share) and the $3 earliest virtual
// times win, ties to the higher priority. This is stride scheduling: with
// every priority ready the claims follow the shares, and a priority with
// ready jobs waits at most a few claims whatever the others hold. Each
// priority's scan uses the claim index, as the strict claim does; rows an
// offer locked but did not win stay locked, unclaimed, until the
// statement's transaction ends.
//
// When no priority but $9 (the one the process last claimed from) has a
// due available job, the weighted claim is the strict claim of $9's
// range, and that is what runs: no offers, no window, no sort. The test
// probes the other priorities' first index entries, and a row another
// transaction holds locked counts as ready, so that a claim running
// beside it takes the weighted path. Only the branch the test picks runs
// (each array is an init plan, run when first used), so the weighted
// claim costs an index probe per other priority more than before (a
// lateral probe with a LIMIT: as a semi-join, planned on a table not yet
// analysed, the test read every ready job's index entry; its ORDER BY is
// the claim index's, so that a plan for a table full of ready jobs does
// not scan the table for the first one instead) and saves the
// offers' window and sorts when one priority holds the ready jobs (see
// "PostgreSQL margins" in docs/benchmarks.md). A claim returns the
// weight column, so the passes advance the same way on either branch.
// Either branch clears held (a job put back by Hold is held no longer
// once claimed), as the strict claim does.
var sqlClaimWeighted = `
UPDATE {jobs} j SET state = 'running', attempt = j.attempt + 1, lease_owner = $4::text, held = false,
    lease_expires_at = ` + dbTime("$5") + `, heartbeat_at = $2::timestamptz, attempted_at = $2::timestamptz{async}
WHERE j.id = ANY (CASE WHEN NOT EXISTS (
    SELECT 1 FROM unnest($6::int[]) AS o(prio)
    CROSS JOIN LATERAL (SELECT 1 FROM {jobs}
        WHERE queue = $1::text AND state = 'available' AND run_at <= $2::timestamptz AND priority = o.prio
        ORDER BY run_at, id
        LIMIT 1) r
    WHERE o.prio <> $9::integer)
THEN ARRAY(
    SELECT id FROM {jobs}
    WHERE queue = $1::text AND state = 'available' AND run_at <= $2::timestamptz AND priority = $9::integer{from}
        AND ` + notPaused + `
    ORDER BY run_at, id
    LIMIT $3::bigint
    FOR UPDATE SKIP LOCKED)
ELSE ARRAY(
    SELECT c.id FROM unnest($6::int[], $7::bigint[], $8::bigint[]) AS p(prio, pass, stride)
    CROSS JOIN LATERAL (
        SELECT x.id, row_number() OVER (ORDER BY x.run_at, x.id) AS k FROM (
            SELECT id, run_at FROM {jobs}
            WHERE queue = $1::text AND state = 'available' AND run_at <= $2::timestamptz AND priority = p.prio
                AND ` + notPaused + `
            ORDER BY run_at, id
            LIMIT $3::bigint
            FOR UPDATE SKIP LOCKED) x) c
    ORDER BY p.pass + c.k * p.stride, p.prio
    LIMIT $3::bigint) END)
RETURNING j.id, j.priority, j.run_at, j.scheduled_at, j.attempt, j.max_attempts, j.key, j.group_key, j.target, j.payload,
    j.key_bytes, j.group_bytes, j.meta`

// passes is this process's stride-scheduling state for weighted dispatch:
// per priority, the virtual time its next claim starts from. Each process
// keeps its own, so the shares hold per process; across a fleet they hold
// as long as each process claims from every ready priority.
type passes struct {
	mu      sync.Mutex
	weights []int32 // the priorities' weight column values
	stride  []int64 // inversely proportional to the shares
	pass    []int64
	last    int32 // the weight of the priority the last claim took from (the claim's $9)
}

// maxStride bounds the strides: the shares' common multiple when it is
// smaller, else this divided by each share (the proportions then hold to
// within one part in maxStride/1000).
const maxStride = 1 << 24

// newPasses returns the state for priorities ps, nil for strict ones and
// for a single priority (whose weighted claim is the strict one).
func newPasses(cfg *storekit.Config) *passes {
	if !cfg.Weighted() || len(cfg.Priorities) < 2 {
		return nil
	}
	l := int64(1)
	for _, p := range cfg.Priorities {
		l = lcm(l, int64(p.Share))
		if l > maxStride {
			l = maxStride
			break
		}
	}
	w := &passes{}
	for _, p := range cfg.Priorities {
		w.weights = append(w.weights, int32(p.Weight))
		w.stride = append(w.stride, l/int64(p.Share))
		w.pass = append(w.pass, 0)
	}
	w.last = w.weights[0]
	return w
}

// args returns the weighted claim's $6, $7, $8 and $9.
func (w *passes) args() (weights []int32, pass, stride []int64, last int32) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.weights, append([]int64(nil), w.pass...), w.stride, w.last
}

// advance moves the passes past the jobs a claim returned (their weight
// column values). A priority that offered fewer jobs than it could have
// won (none ready) restarts from the virtual time the claim reached, so
// that it cannot save up claims while idle and then starve the others.
// A claim that took from one priority only makes it the next claim's $9:
// while it is the only one with ready jobs, the claim runs strictly.
func (w *passes) advance(weights []int) {
	if len(weights) == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !slices.ContainsFunc(weights, func(wt int) bool { return wt != weights[0] }) {
		w.last = int32(weights[0])
	}
	reached := int64(-1 << 62)
	for _, wt := range weights {
		for i := range w.weights {
			if int(w.weights[i]) == wt {
				w.pass[i] += w.stride[i]
				reached = max(reached, w.pass[i])
			}
		}
	}
	low := reached
	for i := range w.pass {
		w.pass[i] = max(w.pass[i], reached-w.stride[i])
		low = min(low, w.pass[i])
	}
	for i := range w.pass {
		w.pass[i] -= low // keep them small
	}
}

func lcm(a, b int64) int64 {
	x, y := a, b
	for y != 0 {
		x, y = y, x%y
	}
	return a / x * b
}
