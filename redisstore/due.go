package redisstore

import (
	"context"
	"math"
	"time"

	"github.com/queuekit/queue"
)

// A scheduled job becomes claimable at its due time with no script run,
// so no wake-up token announces it: a Claim sleeps until the next due
// time it learnt from its last claim call, and the claim call it makes
// then promotes the job. Only the Claims that looked since the job was
// scheduled know its time: the one its wake-up token woke (the add and
// settle scripts push one for a job that becomes the first due), and
// those whose claim calls came later. When none of them sleeps at the
// due time (each took another job meanwhile, or the process that
// scheduled the job runs no Claim), a Claim asleep elsewhere would sleep
// until its poll, or until the leader's janitor promotes.
//
// So each process keeps, per shard, the next due time it learnt (from
// every claim call's reply, its own scheduling adds and retries, and the
// promotions it runs), and Claims sleep until the earliest of it and
// their own. dueLoop then hands the job on: when a due time passed
// handOnGrace ago and no claim call or promotion of this process has
// seen it since (a Claim asleep here claims at the due time and moves the
// learnt time past it), it promotes the shard's due jobs, which pushes a
// wake-up token per job made ready, for the Claims asleep in any process.
// Hand-ons are at least handOnGap apart, and a hand-on that found nothing
// to promote (a claim call elsewhere took the jobs at their time: the
// other processes do not need this one's) doubles the gap, up to
// handOnGapMax, until one finds jobs: so that a busy process under a
// stream of due jobs that idle processes claim on time adds one
// promotion every handOnGapMax, not one per due time (120 a second,
// measured, for a job due every 3 ms).

// handOnGrace is how long after a due time a process hands the job on
// when nothing here has taken it; handOnGap the least time between two
// hand-ons (both on the queue's clock).
const (
	handOnGrace  = 5 * time.Millisecond
	handOnGap    = 5 * time.Millisecond
	handOnGapMax = 100 * time.Millisecond
)

// noDue is a shard's learnt next due time when it knows of none.
const noDue = math.MaxInt64

// learnDue records sh's next due time (ms, noDue for none) as a claim
// call or a promotion just read it.
func (s *Store[T]) learnDue(sh *shard, at int64) {
	if old := sh.due.Swap(at); at < old {
		s.kickDue()
	}
}

// noteDue records that this process scheduled a job of sh due at at (ms).
func (s *Store[T]) noteDue(sh *shard, at int64) {
	for {
		old := sh.due.Load()
		if at >= old {
			return
		}
		if sh.due.CompareAndSwap(old, at) {
			s.kickDue()
			return
		}
	}
}

// dueReply reads a script's next due time: -1 for none.
func dueReply(v any) int64 {
	if n := replyInt(v); n >= 0 {
		return n
	}
	return noDue
}

func (s *Store[T]) kickDue() {
	select {
	case s.dueMoved <- struct{}{}:
	default:
	}
}

// learntDue returns the earliest next due time learnt for a reachable
// shard (noDue for none).
func (s *Store[T]) learntDue() int64 {
	at := int64(noDue)
	for _, sh := range s.shards {
		if sh.healthy.Load() {
			at = min(at, sh.due.Load())
		}
	}
	return at
}

// dueLoop hands on the due jobs that nothing in this process took (see
// above), until Close.
func (s *Store[T]) dueLoop() {
	defer s.wg.Done()
	ctx, cancel := s.background()
	defer cancel()
	clk := s.cfg.Clock
	var last int64 // the last hand-on (ms)
	gap := handOnGap
	for {
		var (
			t    queue.Timer
			fire <-chan time.Time
		)
		if at := s.learntDue(); at != noDue {
			at = max(at+handOnGrace.Milliseconds(), last+gap.Milliseconds())
			t = clk.NewTimer(max(time.Duration(at-s.now())*time.Millisecond, 0))
			fire = t.C()
		}
		select {
		case <-fire:
			if did, moved := s.handOn(ctx); did {
				last = s.now()
				if moved > 0 {
					gap = handOnGap
				} else {
					gap = min(2*gap, handOnGapMax)
				}
			}
		case <-s.dueMoved:
		case <-s.closing:
		}
		if t != nil {
			t.Stop()
		}
		if s.isClosing() {
			return
		}
	}
}

// handOn promotes the due jobs of each reachable shard whose learnt due
// time passed handOnGrace ago, and reports whether it did, and how many
// jobs it made ready.
func (s *Store[T]) handOn(ctx context.Context) (did bool, moved int) {
	now := s.now()
	for _, sh := range s.shards {
		if !sh.healthy.Load() || sh.due.Load() > now-handOnGrace.Milliseconds() {
			continue
		}
		did = true
		n, err := s.promoteShard(ctx, sh, now)
		if err != nil {
			// Forgotten: the janitor, the poll and the next claim calls
			// find the job.
			sh.due.Store(noDue)
			if ctx.Err() == nil {
				s.cfg.Logger.Warn("redisstore: promoting due jobs", "priorities", sh.label, "err", err)
			}
			continue
		}
		if n > 0 {
			moved += n
			s.signal()
		}
	}
	return did, moved
}
