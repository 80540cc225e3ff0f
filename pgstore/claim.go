package pgstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/storekit"
	"github.com/queuekit/queue/storekit/durable"
)

// Claim implements storekit.Store. Claims are batched: a fetcher goroutine
// claims for the Claim callers waiting and for the workers whose outcomes
// are being written (claimed beside the outcomes' batch, on another
// connection), up to the claim batch size in one statement, with FOR
// UPDATE SKIP LOCKED; the jobs go to the callers in priority, run_at, id
// order, first come first served. No transaction stays open while a job
// runs: the claim is a lease recorded in the row.
//
// Claim blocks until Start. After Drain (and Close) it returns the jobs
// already claimed for this process, then storekit.ErrDrained.
func (s *Store[T]) Claim(ctx context.Context) (queue.Job[T], error) {
	select {
	case <-s.startCh:
	case <-s.drainCh:
	case <-ctx.Done():
		return queue.Job[T]{}, ctx.Err()
	}
	for {
		s.handMu.Lock()
		if len(s.spare) > 0 {
			j := s.spare[0]
			s.spare = s.spare[1:]
			s.promised = max(s.promised-1, 0)
			s.handMu.Unlock()
			if s.take(j.ID) {
				return j, nil
			}
			continue
		}
		if s.drained.Load() {
			s.handMu.Unlock()
			return queue.Job[T]{}, storekit.ErrDrained
		}
		w := make(chan queue.Job[T], 1)
		s.waiters = append(s.waiters, w)
		s.handMu.Unlock()
		kick(s.wantFetch)
		select {
		case j := <-w:
			if s.take(j.ID) {
				return j, nil
			}
		case <-s.drainCh:
			s.withdraw(w)
		case <-ctx.Done():
			s.withdraw(w)
			return queue.Job[T]{}, ctx.Err()
		}
	}
}

// withdraw removes a Claim caller that stopped waiting; a job already
// handed to it goes back to the front of the spare list.
func (s *Store[T]) withdraw(w chan queue.Job[T]) {
	s.handMu.Lock()
	defer s.handMu.Unlock()
	for i, x := range s.waiters {
		if x == w {
			s.waiters = append(s.waiters[:i], s.waiters[i+1:]...)
			return
		}
	}
	select {
	case j := <-w:
		s.spare = append([]queue.Job[T]{j}, s.spare...)
	default:
	}
}

// want reserves and returns how many jobs the fetcher should claim, at
// most limit: one per Claim caller waiting without a job, plus one per
// worker about to come back for its next job (see expectClaims), less the
// jobs kept in spare and those being claimed already. fetch releases the
// reservation as it hands the claimed jobs out, or when the claim fails.
//
// The jobs claimed for workers about to come back are owed to them: those
// that go to spare are promised (see freeSpare) until they come back.
func (s *Store[T]) want(limit int) int {
	s.handMu.Lock()
	defer s.handMu.Unlock()
	back := int(s.expect.Swap(0))
	n := min(max(len(s.waiters)+back-s.freeSpare()-s.claiming, 0), limit)
	s.claiming += n
	s.owed = min(back, n)
	return n
}

// freeSpare is the number of spare jobs not promised to workers about to
// come back from an outcome: the jobs the fetcher claimed for them while
// their outcomes were written (see promise) wait in spare until they
// return, and a claim decision made meanwhile must not count those jobs
// as free.
func (s *Store[T]) freeSpare() int {
	s.promised = min(s.promised, len(s.spare))
	return len(s.spare) - s.promised
}

// unreserve releases a reservation of want and reports whether
// Claim callers are still waiting. The fetcher releases its own without
// waking itself: a claim that found fewer jobs than it wanted found the
// queue empty, and the fetcher waits for a wake-up (an add, a
// notification, a promotion) or its poll. Woken by its own claims, it
// claimed in a loop for as long as a worker waited: 18 000 statements a
// second on an idle queue.
func (s *Store[T]) unreserve(n int) bool {
	if n == 0 {
		return false
	}
	s.handMu.Lock()
	defer s.handMu.Unlock()
	s.claiming -= n
	return len(s.waiters) > 0
}

// expectClaims tells the fetcher that n workers just had their outcome
// written and will call Claim again: claiming their next jobs while they
// return keeps them from waiting a round trip, and keeps claims batched.
func (s *Store[T]) expectClaims(n int) {
	if n > 0 && !s.drained.Load() {
		s.expect.Add(int64(n))
		kick(s.wantFetch)
	}
}

// take removes id from the held set; false means its lease was lost or
// released while it waited to be handed out.
func (s *Store[T]) take(id int64) bool {
	s.heldMu.Lock()
	defer s.heldMu.Unlock()
	if _, ok := s.held[id]; !ok {
		return false
	}
	delete(s.held, id)
	return true
}

// heldIDs returns the IDs of claimed jobs not yet handed out.
func (s *Store[T]) heldIDs() []int64 {
	s.heldMu.Lock()
	defer s.heldMu.Unlock()
	ids := make([]int64, 0, len(s.held))
	for id := range s.held {
		ids = append(ids, id)
	}
	return ids
}

// fetchLoop claims jobs for waiting Claim callers: when jobs may have
// become claimable (a wake-up, a poll, the due time of a job promoted
// ahead, see promoteAhead, on the queue's clock), and when a Claim caller
// needs one unless the last claim found none left (see dryClaims).
func (s *Store[T]) fetchLoop(ctx context.Context) {
	failures := 0
	poll := time.NewTimer(s.o.PollInterval)
	defer poll.Stop()
	clk := s.cfg.Clock
	due := clk.NewTimer(time.Hour)
	defer due.Stop()
	// handOn: a due time of a job this process promoted ahead passed, and
	// no claim here has taken every job due since. Only this process knows
	// that due time; when no Claim caller here waits for the job, the
	// other processes are told (the NOTIFY Add sends), so that an idle one
	// claims it instead of finding it at its next poll.
	handOn := false
	for ctx.Err() == nil && !s.drained.Load() {
		if _, passed := s.fd.next(clk.Now()); passed { // the claim below takes the jobs due by now
			handOn = true
		}
		want := s.want(s.o.claimBatch)
		if want == 0 && handOn {
			handOn = false
			s.notifyAdded()
		}
		if want > 0 {
			n, err := s.fetch(ctx, want) // releases the reservation
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				failures++
				s.cfg.Logger.Warn("pgstore: claim failed", "err", err, "failures", failures)
				if !durable.Sleep(ctx, backoff(failures, s.o.PollInterval)) {
					return
				}
				continue
			}
			failures = 0
			if n == want {
				continue // there may be more
			}
			handOn = false // every job due by now was taken
		}
		poll.Reset(s.o.PollInterval)
		due.Stop()
		at, passed := s.fd.next(clk.Now())
		if passed {
			s.dry.supplied()
			handOn = true
			continue // a due time passed during the claim: claim again
		}
		if !at.IsZero() {
			due.Reset(max(at.Sub(clk.Now()), 0))
		}
		for waiting := true; waiting; {
			select {
			case <-s.fd.wake: // an earlier due time
				due.Stop()
				at, passed := s.fd.next(clk.Now())
				if !at.IsZero() {
					due.Reset(max(at.Sub(clk.Now()), 0))
				}
				if !passed {
					continue
				}
				s.dry.supplied()
				handOn = true
			case <-s.wantFetch:
				if s.dry.dry() {
					// Nothing to claim until a wake-up. The workers
					// expected back (expectClaims) would find nothing
					// either: they wait as Claim callers, counted as
					// such. Left counted, they made the next wake-up
					// claim a second job for each of them, held here
					// while another process's workers went without.
					s.expect.Store(0)
					continue
				}
			case <-due.C():
				s.dry.supplied()
				handOn = true
			case <-s.wakeFetch:
				s.dry.supplied()
			case <-poll.C:
				s.dry.supplied()
			case <-s.drainCh:
			case <-ctx.Done():
			}
			waiting = false
		}
	}
}

// dryClaims records that the last claim found no job left to claim, until
// something may have made one claimable: a wake-up of the fetcher (an Add,
// a notification, a promotion, a job put back), a due time of a job
// promoted ahead, a poll. Meanwhile a Claim caller that starts waiting,
// or a write batch's workers about to come back, do not make the fetcher
// claim: those claims would find nothing. With scheduled jobs
// falling due one at a time, each worker's return made two claims (one
// in its outcome's transaction, one by the fetcher) that found nothing:
// 1 000-1 600 empty claim statements a second in
// BenchmarkScheduleLateness, which competed with the claims of the jobs
// falling due.
//
// Wake-ups are counted (supplied, by the fetcher as it takes each one); a
// claim that started at count c and found fewer jobs than it asked for
// marks the queue dry at c, and the queue stays dry while the count is c.
// A wake-up that comes while a claim runs is taken after it, so it ends
// the dry spell that claim starts.
type dryClaims struct {
	gen atomic.Uint64 // wake-ups taken by the fetcher
	at  atomic.Uint64 // gen+1 of the claim that found the queue dry; 0: not dry
}

// supplied records a wake-up: jobs may have become claimable.
func (d *dryClaims) supplied() { d.gen.Add(1) }

// mark returns the count to pass to claimed for a claim starting now.
func (d *dryClaims) mark() uint64 { return d.gen.Load() }

// claimed records the result of a claim that started at mark gen and got
// got of the want jobs it asked for.
func (d *dryClaims) claimed(gen uint64, got, want int) {
	if got < want {
		d.at.Store(gen + 1)
	} else {
		d.at.CompareAndSwap(gen+1, 0) // there may be more
	}
}

// dry reports whether the last claim found no job left and nothing may
// have made one claimable since.
func (d *dryClaims) dry() bool { return d.at.Load() == d.gen.Load()+1 }

// backoff returns the wait after n consecutive failures: 50ms doubling,
// capped at max(limit, 5s).
func backoff(n int, limit time.Duration) time.Duration {
	d := 50 * time.Millisecond
	for i := 1; i < n && d < 5*time.Second; i++ {
		d *= 2
	}
	return min(d, max(limit, 5*time.Second))
}

// fetch claims up to n jobs, the fetcher's reservation (see want), and
// queues them for Claim, releasing the reservation as it hands them out;
// it reports how many rows it claimed. It does not wake the fetcher (see
// unreserve).
func (s *Store[T]) fetch(ctx context.Context, n int) (int, error) {
	done := 0
	for {
		gen := s.dry.mark()
		now := s.cfg.Clock.Now()
		// Its own transaction, which only claims: async (see asyncCommit),
		// with its plan cached (see sqlGenericPlans).
		c := s.claimSQL(now, n-done, gen)
		var got []claimed[T]
		b := &pgx.Batch{}
		b.Queue(sqlGenericPlans)
		b.Queue(c.sql, c.args...).Query(func(rows pgx.Rows) error {
			var err error
			got, err = s.scanClaimed(rows)
			return err
		})
		err := s.pool.SendBatch(ctx, b).Close()
		s.noteErr(err)
		if err != nil {
			// The claim may have committed: those jobs are leased to this
			// process and come back when the lease expires.
			s.hint.invalidate()
			s.unreserve(n - done)
			return done, fmt.Errorf("pgstore: claim: %w", err)
		}
		s.claimedNow(c, got, n-done)
		// A claim from the hint that got fewer jobs than it asked for
		// may have missed some before it: the rest of the reservation
		// is claimed again without the hint (which claimedNow dropped).
		again := c.from && len(got) < n-done
		release := n - done
		if again {
			release = len(got)
		}
		s.handOutClaimed(got, release)
		done += len(got)
		if !again {
			return done, nil
		}
	}
}

// claimStmt is a claim statement with its arguments, and what claimedNow
// needs to record its result.
type claimStmt struct {
	sql   string
	args  []any
	gen   uint64 // dryClaims' count when it started
	from  bool   // from the claim hint
	epoch uint64 // the claim hint's
}

// claimSQL returns the fetcher's claim statement for up to n jobs due by
// now and its arguments: strict (from the claim hint where it holds), or
// weighted by this process's passes. Its transaction only claims, and
// commits without waiting for the WAL flush (see asyncCommit). gen is
// s.dry.mark() at the claim's start.
func (s *Store[T]) claimSQL(now time.Time, n int, gen uint64) claimStmt {
	prio, runAt, id, from, epoch := s.hint.start(gen, len(s.wakeFetch) > 0, time.Now())
	c := claimStmt{gen: gen, epoch: epoch, args: []any{s.cfg.Name, now, n, s.owner, s.leaseUntil()}}
	if s.passes == nil {
		c.sql, c.from = s.q.fetchClaim, from
		if from {
			c.sql, c.args = s.q.fetchClaimFrom, append(c.args, prio, runAt, id)
		}
		return c
	}
	// The hint serves the strict branch, taken while only the last
	// claim's priority has ready jobs: from it when it is that
	// priority's.
	weights, pass, stride, last := s.passes.args()
	c.sql, c.from = s.q.fetchClaimWeighted, from && prio == int(last)
	c.args = append(c.args, weights, pass, stride, last)
	if c.from {
		c.sql, c.args = s.q.fetchClaimWeightedFrom, append(c.args, runAt, id)
	}
	return c
}

// claimedNow records a committed claim c that got got of the want jobs it
// asked for: in dryClaims, and in the claim hint.
func (s *Store[T]) claimedNow(c claimStmt, got []claimed[T], want int) {
	if !c.from || len(got) >= want {
		// Short of jobs from the hint is not dry: see fetch.
		s.dry.claimed(c.gen, len(got), want)
	}
	keys := make([]claimKey, len(got))
	for i, g := range got {
		keys[i] = claimKey{prio: g.weight, runAt: g.runAt, id: g.job.ID}
	}
	s.hint.done(c.gen, c.epoch, c.from, keys, want, time.Now())
}

// claimed is one row returned by the claim statement.
type claimed[T any] struct {
	job     queue.Job[T]
	weight  int
	runAt   time.Time
	payload []byte
}

// scanClaimed reads the rows of the claim statement.
func (s *Store[T]) scanClaimed(rows pgx.Rows) ([]claimed[T], error) {
	var (
		got                    []claimed[T]
		c                      claimed[T]
		sched                  *time.Time
		keyRaw, groupRaw, meta []byte
	)
	_, err := pgx.ForEachRow(rows, []any{&c.job.ID, &c.weight, &c.runAt, &sched, &c.job.Attempt, &c.job.MaxAttempts,
		&c.job.Key, &c.job.Group, &c.job.Target, &c.payload, &keyRaw, &groupRaw, &meta}, func() error {
		c.job.RunAt = time.Time{}
		if sched != nil {
			c.job.RunAt = *sched
		}
		c.job.Key, c.job.Group = loadKey(c.job.Key, keyRaw), loadKey(c.job.Group, groupRaw)
		c.job.Meta = s.loadMeta(c.job.ID, meta)
		got = append(got, c)
		c = claimed[T]{}
		return nil
	})
	if s.passes != nil && len(got) > 0 {
		weights := make([]int, len(got))
		for i := range got {
			weights[i] = got[i].weight
		}
		s.passes.advance(weights)
	}
	return got, err
}

// handOutClaimed hands committed claims to the Claim callers in priority,
// run_at, id order (first come first served), or keeps them in spare for
// the next callers; a job whose payload does not decode is dead-lettered.
//
// In the same critical section it releases reserved claims of the
// reservation that claimed them (see want) and promises the spare jobs
// owed to workers about to come back (see freeSpare), so that no claim
// decision sees the jobs handed out with the reservation still held, or
// counts those jobs as free: claimed while a worker's outcome was being
// written, its next job waits in spare for it. It reports whether Claim
// callers are still waiting.
func (s *Store[T]) handOutClaimed(got []claimed[T], reserved int) (waiting bool) {
	jobs := make([]queue.Job[T], 0, len(got))
	if len(got) > 0 {
		s.ready.Add(-int64(len(got)))
		slices.SortFunc(got, func(a, b claimed[T]) int {
			if a.weight != b.weight {
				return a.weight - b.weight
			}
			if c := a.runAt.Compare(b.runAt); c != 0 {
				return c
			}
			return int(a.job.ID - b.job.ID)
		})
		for i := range got {
			c := &got[i]
			c.job.Priority = s.label(c.weight)
			if err := s.o.Decode(c.job.ID, c.payload, &c.job.Payload); err != nil {
				s.deadLetterUndecodable(c.job, err)
				continue
			}
			jobs = append(jobs, c.job)
		}
		s.heldMu.Lock()
		for _, j := range jobs {
			s.held[j.ID] = j.Attempt
		}
		s.heldMu.Unlock()
	}
	s.handMu.Lock()
	defer s.handMu.Unlock()
	s.claiming -= reserved
	for _, j := range jobs {
		if len(s.waiters) > 0 {
			w := s.waiters[0]
			s.waiters = s.waiters[1:]
			w <- j
			continue
		}
		s.spare = append(s.spare, j)
	}
	s.promised = min(s.promised+s.owed, len(s.spare))
	s.owed = 0
	return len(s.waiters) > 0
}

// deadLetterUndecodable dead-letters a claimed job whose payload does not
// decode, in the background, and reports it.
func (s *Store[T]) deadLetterUndecodable(job queue.Job[T], cause error) {
	s.cfg.Logger.Error("pgstore: undecodable payload; job dead-lettered", "job", job.ID, "key", job.Key, "err", cause)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
		defer cancel()
		if werr := s.Dead(ctx, job, cause); werr != nil {
			s.cfg.Logger.Error("pgstore: dead-letter failed", "job", job.ID, "err", werr)
			return
		}
		s.cfg.Report(queue.Event{Kind: queue.EventDead, Time: s.cfg.Clock.Now(), JobID: job.ID, Key: job.Key,
			Target: job.Target, Priority: job.Priority, Attempt: job.Attempt, Err: cause})
	}()
}

// releaseHeld gives back the jobs claimed but never handed out.
func (s *Store[T]) releaseHeld(ctx context.Context) {
	s.handMu.Lock()
	s.spare = nil
	s.handMu.Unlock()
	s.heldMu.Lock()
	ids := make([]int64, 0, len(s.held))
	for id := range s.held {
		ids = append(ids, id)
	}
	clear(s.held)
	s.heldMu.Unlock()
	if len(ids) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	// The release notifies: other processes' workers waiting for work
	// take these jobs at once rather than at their next poll.
	var released, notes int64
	if err := s.pool.QueryRow(ctx, s.q.release, ids, s.owner, s.channel, s.cfg.Name).Scan(&released, &notes); err != nil {
		s.cfg.Logger.Warn("pgstore: releasing unclaimed jobs failed; they return when their lease expires", "err", err, "jobs", len(ids))
	}
}

// listenLoop holds a dedicated connection that LISTENs on the schema's
// channel and wakes the fetcher and promoter on each notification for this
// queue. It reconnects with backoff; while it is down, polling does the
// work.
func (s *Store[T]) listenLoop(ctx context.Context) {
	failures := 0
	for ctx.Err() == nil {
		err := s.listenOnce(ctx)
		s.listening.Store(false)
		if ctx.Err() != nil {
			return
		}
		failures++
		s.cfg.Logger.Warn("pgstore: listen connection lost; polling meanwhile", "err", err, "failures", failures)
		if !durable.Sleep(ctx, backoff(failures, s.o.PollInterval)) {
			return
		}
	}
}

func (s *Store[T]) listenOnce(ctx context.Context) error {
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig)
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{s.channel}.Sanitize()); err != nil {
		return err
	}
	s.listening.Store(true)
	s.tw.listenOnce.Do(func() { close(s.tw.listenUp) })
	// Anything sent while we were not listening is missed: look now.
	kick(s.wakeFetch)
	kick(s.wakePromote)
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		switch {
		case n.Payload == s.cfg.Name:
			kick(s.wakeFetch)
			kick(s.wakePromote)
		case strings.HasPrefix(n.Payload, "slot {"): // a released slot (slots.go)
			s.slotNoted(n.Payload)
		case strings.HasPrefix(n.Payload, "{"): // a target entry (targets.go)
			s.targetNoted(n.Payload)
		}
	}
}
