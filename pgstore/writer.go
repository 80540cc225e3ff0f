package pgstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/storekit"
	"github.com/queuekit/queue/storekit/durable"
)

// writeTimeout bounds one write batch, retries included.
const writeTimeout = 30 * time.Second

type opKind uint8

const (
	opComplete opKind = iota
	opDead
	opRetry
	opDefer
	opHold // a Defer that marks the job held for its target
	opCancel
	opHeartbeat
)

// op is one outcome (or heartbeat) waiting to be written.
type op struct {
	kind    opKind
	id      int64
	attempt int
	key     string // the job's key: only keyed jobs can have reruns to release
	at      time.Time
	err     string
	ids     []int64       // opHeartbeat
	out     opResult      // set by execute
	res     chan opResult // out, delivered by the writer
}

type opResult struct {
	err        error
	superseded bool
	kept       map[int64]bool // opHeartbeat: the leases extended
	cancel     map[int64]bool // opHeartbeat: kept, but an operator asked to cancel the job
}

// writer batches outcomes: one goroutine takes every op queued while the
// previous batch was being written and writes them in one pipelined
// implicit transaction (one round trip, one commit). Under load batches
// grow; a lone op is written at once. Each caller still gets its own
// result, after its batch committed, so an outcome that Complete reports
// as written is durable.
type writer struct {
	mu      sync.RWMutex // guards closed against sends on ch
	closed  bool
	ch      chan *op
	max     int
	once    sync.Once
	done    chan struct{}
	execute func([]*op) // writes a batch and sets each op's out

	limits         lingerLimits
	pause, backoff int // lingering is off for pause more batches (run's goroutine only)
}

func (w *writer) init(max int) {
	w.ch = make(chan *op, 2*max)
	w.max = max
	w.done = make(chan struct{})
	w.limits = defaultLinger
}

// submit queues o and waits for its result. After close, o is written
// alone, at once.
func (w *writer) submit(ctx context.Context, o *op) opResult {
	o.res = make(chan opResult, 1)
	w.mu.RLock()
	if w.closed {
		w.mu.RUnlock()
		w.execute([]*op{o})
		return o.out
	}
	w.once.Do(func() { go w.run() })
	select {
	case w.ch <- o:
	case <-ctx.Done():
		w.mu.RUnlock()
		return opResult{err: ctx.Err()}
	}
	w.mu.RUnlock()
	select {
	case r := <-o.res:
		return r
	case <-ctx.Done():
		// The op may still be written.
		return opResult{err: ctx.Err()}
	}
}

func (w *writer) run() {
	defer close(w.done)
	batch := make([]*op, 0, w.max)
	var (
		want int           // ops expected soon: queued during the last batch, and its callers
		took time.Duration // the last batch's write
	)
	for o := range w.ch {
		batch = w.collect(append(batch[:0], o), want, took)
		start := time.Now()
		w.execute(batch)
		took = time.Since(start)
		// Counted before the callers hear back, so that none of them is
		// counted twice.
		want = len(w.ch)
		for _, o := range batch {
			if o.kind != opHeartbeat {
				want++
			}
			o.res <- o.out
		}
		clear(batch)
	}
}

// lingerLimits bound collect's wait.
type lingerLimits struct {
	gap   time.Duration // no op for this long ends a wait
	most  time.Duration // the longest wait
	floor time.Duration // the shortest limit, whatever the last write took (0; tests raise it)
}

var defaultLinger = lingerLimits{gap: 50 * time.Microsecond, most: time.Millisecond}

const (
	lingerPause  = 64 // batches without waiting after waits that failed, at most
	lingerEnough = 2  // a wait that brought at least 1/lingerEnough of the ops expected paid
)

// collect adds the queued ops to batch, up to max, and then waits for
// more until want ops are in (the ops queued while the last batch was
// written, and the callers it answered), for at most half the last write
// (limits.most at most), and as long as ops keep coming (limits.gap).
//
// The callers of the last batch found their next jobs claimed by it, and
// a short job brings them back at once. Without the wait, the first of
// them woke the writer (a channel receive runs the receiver next) and was
// written almost alone, while the rest waited a commit for it: the
// workers settled into groups written in turn, and a busy worker's cycle
// took two commits or more. Timers cannot wait a fraction of a
// millisecond (the runtime sleeps in milliseconds), so the writer yields
// the processor to the returning workers and looks again. When the callers
// are busy in longer jobs, a wait that brings too few of them turns
// waiting off for a while (doubling up to lingerPause batches), so that
// a trickle of outcomes costs little spinning.
func (w *writer) collect(batch []*op, want int, took time.Duration) []*op {
	batch, open := w.drain(batch)
	want = min(want, w.max)
	limit := min(max(took/2, w.limits.floor), w.limits.most)
	if !open || len(batch) >= want || limit <= 0 {
		return batch
	}
	if w.pause > 0 {
		w.pause--
		return batch
	}
	start := time.Now()
	deadline := start.Add(limit)
	seen, at := len(batch), start
	for len(batch) < want && open {
		runtime.Gosched()
		batch, open = w.drain(batch)
		now := time.Now()
		if len(batch) > seen {
			seen, at = len(batch), now
		}
		if now.Sub(at) >= w.limits.gap || now.After(deadline) {
			break
		}
	}
	if lingerEnough*len(batch) >= want {
		w.backoff = 0
	} else {
		w.backoff = min(max(2*w.backoff, 1), lingerPause)
		w.pause = w.backoff
	}
	return batch
}

// drain adds the queued ops to batch, up to max; false means ch is closed.
func (w *writer) drain(batch []*op) ([]*op, bool) {
	for len(batch) < w.max {
		select {
		case o, ok := <-w.ch:
			if !ok {
				return batch, false
			}
			batch = append(batch, o)
		default:
			return batch, true
		}
	}
	return batch, true
}

// close writes what is queued and stops the goroutine.
func (w *writer) close() {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.closed = true
	close(w.ch)
	w.mu.Unlock()
	started := true
	w.once.Do(func() { started = false })
	if started {
		<-w.done
	}
}

// Complete implements storekit.Store. The completion is batched with others
// and returns once committed. It returns ErrLeaseLost (and writes nothing)
// if this process no longer holds the job. A rerun waiting for the job's
// key becomes available in the same transaction.
func (s *Store[T]) Complete(ctx context.Context, job queue.Job[T]) error {
	return s.outcome(ctx, &op{kind: opComplete, id: job.ID, attempt: job.Attempt, key: job.Key})
}

// Dead implements storekit.Store: the job stays in the table, state dead, with
// cause as its last error and in its error history, until pruned (see
// WithDeadRetention).
func (s *Store[T]) Dead(ctx context.Context, job queue.Job[T], cause error) error {
	return s.outcome(ctx, &op{kind: opDead, id: job.ID, attempt: job.Attempt, key: job.Key, err: errText(cause)})
}

// Retry implements storekit.Store. The job waits in state retryable until at;
// cause is recorded as its last error and appended to its error history.
// If a coalesced rerun of its key is waiting, the job is cancelled instead,
// the rerun becomes ready, and Retry returns storekit.ErrSuperseded.
func (s *Store[T]) Retry(ctx context.Context, job queue.Job[T], at time.Time, cause error) error {
	return s.outcome(ctx, &op{kind: opRetry, id: job.ID, attempt: job.Attempt, key: job.Key, at: ceilMicro(at), err: errText(cause)})
}

var _ storekit.ClaimCanceller[int] = (*Store[int])(nil)

// CancelClaimed implements storekit.ClaimCanceller: the claimed job ends in
// the cancelled state with reason, as Dead does in the dead state.
func (s *Store[T]) CancelClaimed(ctx context.Context, job queue.Job[T], reason error) error {
	return s.outcome(ctx, &op{kind: opCancel, id: job.ID, attempt: job.Attempt, key: job.Key, err: errText(reason)})
}

// Defer implements storekit.Store: like Retry, but the attempt is given back,
// and cause (a downstream's "retry in" reason) is recorded only when given.
func (s *Store[T]) Defer(ctx context.Context, job queue.Job[T], at time.Time, cause error) error {
	return s.outcome(ctx, &op{kind: opDefer, id: job.ID, attempt: job.Attempt, key: job.Key, at: ceilMicro(at), err: errText(cause)})
}

var _ storekit.HoldStore[int] = (*Store[int])(nil)

// Hold implements queue.HoldStore: Defer without a cause, with the job
// marked held for its target (the held column, migration 007) until it is
// claimed again.
func (s *Store[T]) Hold(ctx context.Context, job queue.Job[T], at time.Time) error {
	return s.outcome(ctx, &op{kind: opHold, id: job.ID, attempt: job.Attempt, key: job.Key, at: ceilMicro(at)})
}

// ReleaseHeld implements queue.HoldStore: the target's held jobs that are
// not yet due become due now, and a promotion makes them available and
// tells every process (NOTIFY), so that a waiting worker anywhere in the
// fleet claims them.
func (s *Store[T]) ReleaseHeld(ctx context.Context, target string) (int, error) {
	if err := s.adminReady(); err != nil {
		return 0, err
	}
	var n int
	err := s.pool.QueryRow(ctx, s.q.releaseHeld, s.cfg.Name, target, s.cfg.Clock.Now()).Scan(&n)
	s.noteErr(err)
	if err != nil {
		return 0, fmt.Errorf("pgstore: releasing held jobs of target %q: %w", target, err)
	}
	if n > 0 {
		if _, err := s.PromoteDue(ctx); err != nil {
			kick(s.wakePromote) // the promoter tries again
			return n, err
		}
	}
	return n, nil
}

func (s *Store[T]) outcome(ctx context.Context, o *op) error {
	r := s.w.submit(ctx, o)
	if r.err != nil {
		return r.err
	}
	if r.superseded {
		return storekit.ErrSuperseded
	}
	return nil
}

// errText is err's text as it is written: NUL bytes and bytes that are
// not UTF-8, which PostgreSQL's text refuses, escaped (core.ErrorText).
func errText(err error) string { return storekit.ErrorText(err) }

// Heartbeat implements storekit.Leaser: it extends, in one statement, the
// leases of the given jobs (and of jobs claimed but not yet handed out) to
// now + the lease TTL, and returns the IDs among ids that this process no
// longer holds, or that an operator asked to cancel (admin Cancel): the
// queue cancels those jobs' contexts. CancelRequested tells the two
// apart.
func (s *Store[T]) Heartbeat(ctx context.Context, ids []int64) ([]int64, error) {
	held := s.heldIDs()
	all := append(append(make([]int64, 0, len(ids)+len(held)), ids...), held...)
	if len(all) == 0 {
		return nil, nil
	}
	r := s.w.submit(ctx, &op{kind: opHeartbeat, ids: all})
	if r.err != nil {
		return nil, r.err
	}
	var lost []int64
	for _, id := range ids {
		if !r.kept[id] || r.cancel[id] {
			lost = append(lost, id)
		}
	}
	s.noteCancels(ids, r.cancel)
	s.heldMu.Lock()
	for _, id := range held {
		if !r.kept[id] {
			delete(s.held, id)
		}
	}
	s.heldMu.Unlock()
	return lost, nil
}

// execBatch writes a batch and sets each op's result, which the writer
// delivers when it returns. A failure that leaves the outcome unknown (the
// connection broke) is retried; a statement the server refused is retried
// op by op, so that one bad op cannot fail the others, and a lone op whose
// error text the server refused as data is written once more with a
// plain text in its place (textRefused): an outcome that failed would
// leave its job leased, to be rescued and run again.
func (s *Store[T]) execBatch(batch []*op) {
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	var (
		err      error
		replaced bool // the lone op's error text was replaced (textRefused)
	)
	for try := 0; ; try++ {
		err = s.writeOnce(ctx, batch, try > 0)
		s.noteErr(err)
		if err == nil {
			return
		}
		if isServerError(err) {
			if len(batch) > 1 {
				for _, o := range batch {
					s.execBatch([]*op{o})
				}
				return
			}
			if o := batch[0]; o.err != "" && !replaced && isDataError(err) {
				s.cfg.Logger.Warn("pgstore: the database refused a job's error text; writing the outcome without it",
					"id", o.id, "err", err)
				o.err, replaced = textRefused(o.err, err), true
				continue
			}
			break
		}
		if try >= 5 || !durable.Sleep(ctx, backoff(try+1, time.Second)) {
			break
		}
		s.cfg.Logger.Warn("pgstore: writing outcomes failed; retrying", "err", err, "ops", len(batch), "try", try+1)
	}
	for _, o := range batch {
		o.out = opResult{err: fmt.Errorf("pgstore: write: %w", err)}
	}
}

// writeOnce sends the batch's statements in one pipeline, which runs as
// one implicit transaction. retried says an earlier try may have
// committed: an op that finds its job no longer held is then taken as
// written.
func (s *Store[T]) writeOnce(ctx context.Context, batch []*op, retried bool) error {
	now := s.cfg.Clock.Now()
	var (
		cIDs, dIDs, rIDs, hIDs []int64
		cAtt, dAtt, rAtt       []int32
		dErr, rErr, dState     []string
		rAt                    []time.Time
		rUndo, rHold           []bool
		keyed                  []int64 // ended jobs with a key
	)
	// The statements look each row's values up by its ID's position in
	// the ID array, which must be ascending (see sqlComplete).
	sorted := slices.Clone(batch)
	slices.SortFunc(sorted, func(a, b *op) int { return cmp.Compare(a.id, b.id) })
	for _, o := range sorted {
		if o.kind != opHeartbeat && o.key != "" {
			keyed = append(keyed, o.id)
		}
		switch o.kind {
		case opComplete:
			cIDs, cAtt = append(cIDs, o.id), append(cAtt, int32(o.attempt))
		case opDead, opCancel:
			dIDs, dAtt, dErr = append(dIDs, o.id), append(dAtt, int32(o.attempt)), append(dErr, o.err)
			st := stDead
			if o.kind == opCancel {
				st = stCancelled
			}
			dState = append(dState, st)
		case opRetry, opDefer, opHold:
			rIDs, rAtt, rAt = append(rIDs, o.id), append(rAtt, int32(o.attempt)), append(rAt, o.at)
			rErr, rUndo = append(rErr, o.err), append(rUndo, o.kind != opRetry)
			rHold = append(rHold, o.kind == opHold)
		case opHeartbeat:
			hIDs = append(hIDs, o.ids...)
		}
	}
	b := &pgx.Batch{}
	b.Queue(sqlGenericPlans)
	done := map[int64]bool{}
	sup := map[int64]bool{}
	kept := map[int64]bool{}
	cancel := map[int64]bool{}
	if len(cIDs) > 0 {
		b.Queue(s.q.complete, cIDs, cAtt, s.owner, now).Query(func(rows pgx.Rows) error {
			return collectIDs(rows, done)
		})
	}
	if len(dIDs) > 0 {
		b.Queue(s.q.dead, dIDs, dAtt, s.owner, now, dErr, dState).Query(func(rows pgx.Rows) error {
			return collectIDs(rows, done)
		})
	}
	if len(rIDs) > 0 {
		b.Queue(s.q.lockRows, rIDs)
		b.Queue(s.q.retry, rIDs, rAtt, rAt, rErr, rUndo, s.owner, now, rHold).Query(func(rows pgx.Rows) error {
			var id int64
			var superseded bool
			_, err := pgx.ForEachRow(rows, []any{&id, &superseded}, func() error {
				done[id] = true
				sup[id] = superseded
				return nil
			})
			return err
		})
	}
	if len(hIDs) > 0 {
		b.Queue(s.q.heartbeat, hIDs, s.owner, now, s.leaseUntil()).Query(func(rows pgx.Rows) error {
			var (
				id  int64
				req bool
			)
			_, err := pgx.ForEachRow(rows, []any{&id, &req}, func() error {
				kept[id] = true
				if req {
					cancel[id] = true
				}
				return nil
			})
			return err
		})
	}
	ended := len(cIDs) + len(dIDs) + len(rIDs)
	var rerunReady, reruns int64
	if len(keyed) > 0 {
		capacity := 0
		if s.o.checkCapacity {
			capacity = s.cfg.Capacity
		}
		b.Queue(s.q.releaseReruns, s.cfg.Name, keyed, now, capacity, now.Add(s.cfg.RequeueDelay), s.channel).
			QueryRow(func(row pgx.Row) error {
				var notes int64
				return row.Scan(&rerunReady, &reruns, &notes)
			})
	}
	// The workers whose runs end here come back for their next jobs: the
	// fetcher claims them now, on its own connection, while this batch is
	// written (see expectClaims). Claimed in this transaction, they cost
	// no round trip of their own, but the claim's row work and the
	// outcomes' ran one after the other on one backend before the commit,
	// with the other core idle: beside it, the burn-down ran 1.2x faster
	// at 100 and 1 000 workers (docs/benchmarks.md, issue #35 item 5).
	// A retry writes the same outcomes: their workers were counted.
	if !retried {
		s.expectClaims(ended)
	}
	err := s.pool.SendBatch(ctx, b).Close()
	if err != nil {
		return err
	}
	for _, o := range batch {
		var r opResult
		switch o.kind {
		case opHeartbeat:
			r.kept, r.cancel = kept, cancel
		default:
			switch {
			case done[o.id]:
				r.superseded = sup[o.id]
			case !retried:
				r.err = ErrLeaseLost
			}
		}
		o.out = r
	}
	if rerunReady > 0 {
		s.ready.Add(rerunReady)
		kick(s.wakeFetch)
	}
	if len(rIDs) > 0 || reruns > rerunReady {
		kick(s.wakePromote)
		if s.drained.Load() {
			// This process no longer promotes (a shutdown puts back the
			// jobs it interrupted): the others' promoters must, when
			// the jobs are due, and they know of them only if told. One
			// notification per batch, coalesced (see notifier).
			s.notifyAdded()
		}
	}
	return nil
}

// isDataError reports whether err is the server refusing a value
// (SQLSTATE class 22, data exception: an invalid byte sequence, a value
// too long).
func isDataError(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && strings.HasPrefix(pgErr.Code, "22")
}

// textRefused is the error text written in place of text when the
// database refused it with err: what can be kept of it, and why.
func textRefused(text string, err error) string {
	var pgErr *pgconn.PgError
	errors.As(err, &pgErr)
	keep := text
	if len(keep) > 200 {
		keep = keep[:200]
	}
	// Printable ASCII only: whatever the database refused, this it takes.
	keep = strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e {
			return '?'
		}
		return r
	}, keep)
	return fmt.Sprintf("%s (pgstore: the full error text was refused by the database: SQLSTATE %s)", keep, pgErr.Code)
}

func collectIDs(rows pgx.Rows, dst map[int64]bool) error {
	var id int64
	_, err := pgx.ForEachRow(rows, []any{&id}, func() error {
		dst[id] = true
		return nil
	})
	return err
}
