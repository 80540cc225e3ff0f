package pgstore

import (
	"container/heap"
	"context"
	"fmt"
	"sync"
	"time"
)

// Scheduled jobs start on a timer to the next due time, not on a poll:
// the promoter knows the earliest due time of the queue (it reads it after
// each promotion and on each wake-up) and sleeps until then. A job with an
// earlier due time moves the timer: one added by this process at once,
// without a round trip (noteDue); one added by another process when its
// notification arrives (listenLoop), which makes the promoter read the
// earliest due time again. The poll interval stays a safety net for
// notifications lost while the LISTEN connection was down.
//
// When several processes share a queue, each one's timer fires at the
// same due time; the promotion takes the rows with SKIP LOCKED, so one
// process promotes each job and notifies, and the others' fetchers claim
// it too. A process that finds a due job it could not take (another
// process holds its row) waits for that process's notification, or at
// most 50 ms (the poll interval if shorter), rather than promoting in a
// loop.

// dueTimer is the promoter's next wake-up for a due time, shared with Add.
type dueTimer struct {
	mu   sync.Mutex
	at   time.Time // the promoter's timer (armAhead before a due time); zero when none is set
	wake chan struct{}
}

// noteDue tells the promoter that this process scheduled a job due at t:
// when that is before the promoter's timer, the timer is moved to t (less
// armAhead, like the promoter's own timer).
func (s *Store[T]) noteDue(t time.Time) {
	t = t.Add(-armAhead)
	d := &s.due
	d.mu.Lock()
	earlier := d.at.IsZero() || t.Before(d.at)
	if earlier {
		d.at = t
	}
	d.mu.Unlock()
	if earlier {
		kick(d.wake)
	}
}

// clear records that the promoter has no timer while it looks at the
// database: an Add meanwhile moves the timer (see settle).
func (d *dueTimer) clear() {
	d.mu.Lock()
	d.at = time.Time{}
	d.mu.Unlock()
}

// settle records the promoter's timer: t (zero: none), or the due time an
// Add noted while the promoter looked, if earlier. It returns the timer's
// time, zero for none.
func (d *dueTimer) settle(t time.Time) time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !t.IsZero() && (d.at.IsZero() || t.Before(d.at)) {
		d.at = t
	}
	return d.at
}

// stuckWait bounds the wait of a promoter that found a due job it could
// not take: the process that holds its row notifies when it commits.
const stuckWait = 50 * time.Millisecond

// promoteLoop promotes due jobs when the next one is due (on the queue's
// clock) and every poll interval, reads the next due time again when woken
// by a notification, moves its timer when this process schedules an
// earlier job, refreshes Len, and keeps the leases of jobs waiting in the
// hand-off buffer.
func (s *Store[T]) promoteLoop(ctx context.Context) {
	clk := s.cfg.Clock
	due := clk.NewTimer(time.Hour)
	defer due.Stop()
	poll := time.NewTimer(s.o.PollInterval)
	defer poll.Stop()
	failures := 0
	lastExtend := time.Now()
	var (
		counted time.Time // Len's last count
		aimed   time.Time // the next due time the last step read
	)
	promote := true
	for ctx.Err() == nil {
		wait := s.o.PollInterval
		s.due.clear()
		next, stuck, err := s.promoteStep(ctx, promote, &counted)
		if promote && err == nil && aimed.After(clk.Now()) {
			// The job this promotion was for is available now, promoted
			// by this process or, ahead, by another: claim it when due.
			s.fd.add([]time.Time{aimed})
		}
		promote, aimed = false, time.Time{}
		if next != nil {
			aimed = *next
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			wait = backoff(failures, s.o.PollInterval)
		} else {
			failures = 0
		}
		if time.Since(lastExtend) >= s.HeartbeatInterval() {
			lastExtend = time.Now()
			if len(s.heldIDs()) > 0 {
				_, _ = s.Heartbeat(ctx, nil)
			}
		}
		due.Stop()
		var target time.Time
		if next != nil {
			d := next.Sub(clk.Now()) - armAhead
			switch {
			case stuck:
				d = max(d, min(s.o.PollInterval, stuckWait))
			case d <= 0:
				promote = true // (nearly) due since the promotion looked
				continue
			}
			target = clk.Now().Add(d)
		}
		if at := s.due.settle(target); !at.IsZero() {
			due.Reset(max(at.Sub(clk.Now()), 0))
		}
		poll.Reset(wait)
		for waiting := true; waiting; {
			select {
			case <-due.C():
				promote, waiting = true, false
			case <-poll.C:
				promote, waiting = true, false
			case <-s.wakePromote:
				waiting = false
			case <-s.due.wake:
				// This process scheduled a job before the timer.
				if at := s.due.settle(time.Time{}); !at.IsZero() {
					due.Stop()
					due.Reset(max(at.Sub(clk.Now()), 0))
				}
			case <-ctx.Done():
				waiting = false
			}
		}
	}
}

// promoteStep promotes due jobs when promote is set (unless drained),
// reads the next due time, promotes if that is due already, refreshes Len
// when counted is a poll interval old, and returns the next due time, if
// any. stuck reports that the next due time was due when the promotion
// looked: another process holds the row (and notifies when it commits).
//
// The count walks up to 2·capacity index entries, so it is not repeated
// on every wake-up: a process woken by each notification of a busy
// producer counted hundreds of times a second. In between, Len follows
// this process's own adds and claims.
func (s *Store[T]) promoteStep(ctx context.Context, promote bool, counted *time.Time) (next *time.Time, stuck bool, err error) {
	var looked time.Time // when the last promotion looked
	for range 2 {
		if promote && !s.drained.Load() {
			looked = s.cfg.Clock.Now()
			if _, err := s.promoteDue(ctx, &next, promoteAhead); err != nil {
				return nil, false, err
			}
		} else {
			err := s.pool.QueryRow(ctx, s.q.nextDue, s.cfg.Name).Scan(&next)
			s.noteErr(err)
			if err != nil {
				return nil, false, fmt.Errorf("pgstore: next due: %w", err)
			}
		}
		if promote || next == nil || next.After(s.cfg.Clock.Now().Add(armAhead)) {
			break
		}
		promote = true // woken, and a job is (nearly) due: promote it now
	}
	if time.Since(*counted) >= s.o.PollInterval {
		if err := s.countFleet(ctx); err != nil {
			return nil, false, err
		}
		*counted = time.Now()
	}
	if s.tx.pending() {
		if err := s.confirmTx(ctx); err != nil {
			return nil, false, err
		}
	}
	if s.drained.Load() || next == nil {
		return nil, false, nil
	}
	stuck = !looked.IsZero() && !next.After(looked.Add(promoteAhead))
	if stuck && next.After(looked) {
		// Another process is promoting it ahead: claim it at its due
		// time too.
		s.fd.add([]time.Time{*next})
	}
	return next, stuck, nil
}

// promoteAhead is how long before their due time the promoter makes
// scheduled jobs available. The claim statements take only jobs due by
// their now (run_at <= now), so a job promoted ahead is not claimed
// early: the fetcher claims it at its due time (see fetchDue). The
// promotion's round trip, its notification and the other processes'
// contended promotions are then done before the due time, and a job that
// falls due costs one claim statement: with the promotion at the due
// time, two processes scheduling 10 000 jobs over 10 s started them 17-43
// ms late at p99 (BenchmarkScheduleLateness).
const promoteAhead = 50 * time.Millisecond

// armAhead is how long before the next due time the promoter wakes: half
// of promoteAhead, so that each promotion takes the jobs due over the
// next 25 ms or more rather than one at a time, and still runs at least
// 25 ms before the first of them is due.
const armAhead = promoteAhead / 2

// fetchDue holds the due times of the jobs this process promoted ahead
// (and of those it found promoted ahead by another process), earliest
// first: the fetcher claims at each, for the Claim callers waiting.
type fetchDue struct {
	mu   sync.Mutex
	at   timeHeap
	wake chan struct{} // the earliest time moved
}

// add records due times; the fetcher is woken when the earliest moves.
func (f *fetchDue) add(ts []time.Time) {
	if len(ts) == 0 {
		return
	}
	f.mu.Lock()
	var first time.Time
	if len(f.at) > 0 {
		first = f.at[0]
	}
	for _, t := range ts {
		heap.Push(&f.at, t)
	}
	moved := first.IsZero() || f.at[0].Before(first)
	f.mu.Unlock()
	if moved {
		kick(f.wake)
	}
}

// next drops the due times not after now and returns the earliest one
// left (zero: none) and whether any was dropped.
func (f *fetchDue) next(now time.Time) (at time.Time, passed bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(f.at) > 0 && !f.at[0].After(now) {
		heap.Pop(&f.at)
		passed = true
	}
	if len(f.at) > 0 {
		at = f.at[0]
	}
	return at, passed
}

// timeHeap is a min-heap of times (container/heap).
type timeHeap []time.Time

func (h timeHeap) Len() int           { return len(h) }
func (h timeHeap) Less(i, j int) bool { return h[i].Before(h[j]) }
func (h timeHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *timeHeap) Push(x any)        { *h = append(*h, x.(time.Time)) }
func (h *timeHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	*h = old[:len(old)-1]
	return t
}
