package sqlitestore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/queuekit/queue/queuetype"
	"github.com/queuekit/queue/storekit"
)

// Claims: a Claim caller takes a job claimed for this process from the
// buffer, or waits for the fetcher, which claims as many jobs as callers
// wait, in one statement of the writer's next batch (with the outcomes
// queued meanwhile: one commit for a busy worker's outcome and the next
// claims). When a claim finds nothing, the fetcher waits for a sign that
// something became claimable: this process's own add, promotion or put
// back at once, another process's write within the DB's wake interval,
// the poll interval at the latest.

// Claim implements storekit.Store. It blocks until a job is claimed for
// this process, ctx ends, or the store is drained (storekit.ErrDrained
// once the jobs already claimed are handed out).
func (s *Store[T]) Claim(ctx context.Context) (queuetype.Job[T], error) {
	for {
		s.cmu.Lock()
		if len(s.buf) > 0 {
			c := s.buf[0]
			s.buf = s.buf[1:]
			s.cmu.Unlock()
			j, ok := s.decode(&c)
			if !ok {
				continue
			}
			return j, nil
		}
		if s.drained.Load() {
			s.cmu.Unlock()
			return queuetype.Job[T]{}, storekit.ErrDrained
		}
		s.waiting++
		arrived := s.arrived
		s.cmu.Unlock()
		kick(s.wantFetch)
		var err error
		select {
		case <-arrived:
		case <-ctx.Done():
			err = ctx.Err()
		case <-s.drainCh:
		}
		s.cmu.Lock()
		s.waiting--
		s.cmu.Unlock()
		if err != nil {
			return queuetype.Job[T]{}, err
		}
	}
}

// decode makes the Job of a claimed row; a payload the codec refuses
// dead-letters the job (the queue's OnDead sees a *queue.DecodeError).
func (s *Store[T]) decode(c *claimed) (queuetype.Job[T], bool) {
	j := queuetype.Job[T]{ID: c.id, Key: string(c.key), Group: string(c.group), Target: c.target,
		Priority: s.label(c.priority), Attempt: c.attempt, MaxAttempts: c.maxAttempts}
	if c.sched.Valid {
		j.RunAt = fromNS(c.sched.Int64)
	}
	if err := decodeMeta(&j, c.meta); err != nil {
		s.cfg.Logger.Warn("sqlitestore: undecodable metadata; dropped", "job", c.id, "err", err)
	}
	if err := s.o.Decode(c.id, c.payload, &j.Payload); err != nil {
		s.cfg.Logger.Error("sqlitestore: undecodable payload; job dead-lettered", "job", j.ID, "key", j.Key, "err", err)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if werr := s.Dead(ctx, j, err); werr != nil {
				s.cfg.Logger.Error("sqlitestore: dead-letter failed", "job", j.ID, "err", werr)
				return
			}
			s.cfg.Report(queuetype.Event{Kind: queuetype.EventDead, Time: s.cfg.Clock.Now(), JobID: j.ID, Key: j.Key,
				Target: j.Target, Priority: j.Priority, Attempt: j.Attempt, Err: err})
		}()
		return queuetype.Job[T]{}, false
	}
	return j, true
}

// reserve returns how many jobs a claim should take, and counts them as
// being claimed until deliver: the callers waiting beyond the jobs
// buffered and the claims under way (the fetcher's, the promoter's), at
// most the claim batch. Zero when none are wanted or the store drained.
func (s *Store[T]) reserve() int {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	if s.drained.Load() {
		return 0
	}
	n := min(s.waiting-len(s.buf)-s.claiming, s.o.claimBatch)
	if n <= 0 {
		return 0
	}
	s.claiming += n
	return n
}

// deliver buffers the jobs claimed for a reservation of reserved jobs,
// ends the reservation, and wakes the waiting callers.
func (s *Store[T]) deliver(got []claimed, reserved int) {
	s.cmu.Lock()
	s.claiming -= reserved
	if len(got) > 0 {
		s.buf = append(s.buf, got...)
		close(s.arrived)
		s.arrived = make(chan struct{})
	}
	s.cmu.Unlock()
	s.ready.Add(-int64(len(got)))
}

func (s *Store[T]) fetchLoop(ctx context.Context) {
	poll := time.NewTimer(s.o.PollInterval)
	defer poll.Stop()
	for {
		if n := s.fetchable(); n > 0 {
			got, err := s.claim(ctx, n)
			s.deliver(got, n)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				s.noteErr(err)
				s.cfg.Logger.Warn("sqlitestore: claim failed", "err", err)
				if !sleepCtx(ctx, 50*time.Millisecond) {
					return
				}
				continue
			}
			s.noteErr(nil)
			if len(got) < n {
				s.empty.Store(true)
			}
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-s.wantFetch:
		case <-s.wake:
		case <-poll.C:
			s.empty.Store(false)
			poll.Reset(s.o.PollInterval)
		}
	}
}

// fetchable reserves the jobs the fetcher should claim now (see
// reserve): none while the last claim found nothing and nothing woke it.
func (s *Store[T]) fetchable() int {
	if s.empty.Load() {
		return 0
	}
	return s.reserve()
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// claim claims up to n due available jobs of the queue for this process
// in one write, in priority, run_at, id order (or by the weighted
// priorities' shares), unless the queue is paused.
func (s *Store[T]) claim(ctx context.Context, n int) ([]claimed, error) {
	var got []claimed
	err := s.db.write(ctx, func(tx *wtx) error {
		var err error
		got, err = s.claimIn(ctx, tx, n)
		return err
	})
	if err != nil {
		return nil, err // got is of a transaction that did not commit
	}
	return got, nil
}

func (s *Store[T]) claimIn(ctx context.Context, tx *wtx, n int) ([]claimed, error) {
	now := s.now()
	var paused int
	if err := tx.QueryRowContext(ctx, "SELECT coalesce((SELECT paused FROM queuekit_queues WHERE queue = ?), 0)", s.cfg.Name).Scan(&paused); err != nil {
		return nil, err
	}
	if paused != 0 {
		return nil, nil
	}
	var ids []int64
	if s.passes != nil {
		var err error
		if ids, err = s.pickWeighted(ctx, tx, n, now); err != nil {
			return nil, err
		}
		if len(ids) == 0 {
			return nil, nil
		}
	}
	leaseUntil := now + int64(s.o.LeaseTTL)
	var q string
	args := []any{s.owner, leaseUntil, now, now}
	if ids == nil {
		q = `UPDATE queuekit_jobs SET state = 'running', attempt = attempt + 1, lease_owner = ?, held = 0,
			lease_expires_at = ?, heartbeat_at = ?, attempted_at = ?
			WHERE id IN (SELECT id FROM queuekit_jobs WHERE queue = ? AND state = 'available' AND run_at <= ?
				ORDER BY priority, run_at, id LIMIT ?)
			RETURNING ` + claimedCols
		args = append(args, s.cfg.Name, now, n)
	} else {
		q = `UPDATE queuekit_jobs SET state = 'running', attempt = attempt + 1, lease_owner = ?, held = 0,
			lease_expires_at = ?, heartbeat_at = ?, attempted_at = ?
			WHERE id IN (SELECT value FROM json_each(?)) RETURNING ` + claimedCols
		args = append(args, idList(ids))
	}
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	got, err := scanClaimed(rows)
	if err != nil {
		return nil, err
	}
	if ids == nil {
		slices.SortFunc(got, func(a, b claimed) int {
			if a.priority != b.priority {
				return a.priority - b.priority
			}
			if a.runAt != b.runAt {
				return cmpInt(a.runAt, b.runAt)
			}
			return cmpInt(a.id, b.id)
		})
	} else {
		pos := make(map[int64]int, len(ids))
		for i, id := range ids {
			pos[id] = i
		}
		slices.SortFunc(got, func(a, b claimed) int { return pos[a.id] - pos[b.id] })
	}
	return got, nil
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// idList is ids as a JSON array, for json_each.
func idList(ids []int64) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprint(&b, id)
	}
	b.WriteByte(']')
	return b.String()
}

// passes is this process's stride-scheduling state for weighted
// priorities: per priority, the virtual time its next claim starts from.
type passes struct {
	mu      sync.Mutex
	weights []int
	stride  []int64
	pass    []int64
}

const maxStride = 1 << 24

func newPasses(cfg *storekit.Config) *passes {
	if !cfg.Weighted() {
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
		w.weights = append(w.weights, p.Weight)
		w.stride = append(w.stride, l/int64(p.Share))
		w.pass = append(w.pass, 0)
	}
	return w
}

func lcm(a, b int64) int64 {
	g, x := a, b
	for x != 0 {
		g, x = x, g%x
	}
	return a / g * b
}

// pickWeighted chooses up to n due available jobs by stride scheduling:
// each priority offers its first n jobs in run_at, id order; the k-th
// gets the virtual time pass + k × stride and the n earliest win, ties to
// the higher priority. A priority with no job does not advance, and one
// that was idle restarts at the lowest pass of the others, so that it
// gets its share from now on, not a burst for the time it was idle.
func (s *Store[T]) pickWeighted(ctx context.Context, tx *wtx, n int, now int64) ([]int64, error) {
	w := s.passes
	offers := make([][]int64, len(w.weights))
	for i, weight := range w.weights {
		rows, err := tx.QueryContext(ctx, `SELECT id FROM queuekit_jobs WHERE queue = ? AND state = 'available' AND run_at <= ?
			AND priority = ? ORDER BY run_at, id LIMIT ?`, s.cfg.Name, now, weight, n)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return nil, err
			}
			offers[i] = append(offers[i], id)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	low := int64(-1)
	for i := range offers {
		if len(offers[i]) > 0 && (low < 0 || w.pass[i] < low) {
			low = w.pass[i]
		}
	}
	var ids []int64
	next := make([]int, len(offers))
	for len(ids) < n {
		best := -1
		for i := range offers {
			if next[i] >= len(offers[i]) {
				continue
			}
			if best < 0 || w.pass[i] < w.pass[best] {
				best = i
			}
		}
		if best < 0 {
			break
		}
		ids = append(ids, offers[best][next[best]])
		next[best]++
		w.pass[best] += w.stride[best]
	}
	// An idle priority does not bank virtual time.
	for i := range offers {
		if len(offers[i]) == 0 && low >= 0 && w.pass[i] < low {
			w.pass[i] = low
		}
	}
	return ids, nil
}

// releaseBuffered gives back the jobs claimed but never handed out: they
// are available again with the attempt undone.
func (s *Store[T]) releaseBuffered(ctx context.Context) {
	s.cmu.Lock()
	buf := s.buf
	s.buf = nil
	s.cmu.Unlock()
	if len(buf) == 0 {
		return
	}
	ids := make([]int64, len(buf))
	for i := range buf {
		ids[i] = buf[i].id
	}
	err := s.db.write(ctx, func(tx *wtx) error {
		_, err := tx.ExecContext(ctx, `UPDATE queuekit_jobs SET state = 'available', attempt = attempt - 1,
			lease_owner = NULL, lease_expires_at = NULL
			WHERE id IN (SELECT value FROM json_each(?)) AND state = 'running' AND lease_owner = ?`, idList(ids), s.owner)
		return err
	})
	if err != nil {
		s.cfg.Logger.Warn("sqlitestore: giving back claimed jobs failed; they run again when their lease expires", "err", err)
	}
}

// bufferedIDs returns the IDs of the jobs claimed and not handed out, for
// the lease renewal.
func (s *Store[T]) bufferedIDs() []int64 {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	ids := make([]int64, len(s.buf))
	for i := range s.buf {
		ids[i] = s.buf[i].id
	}
	return ids
}
