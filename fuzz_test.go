package queue_test

// Model-based fuzzing of the in-memory queue.
//
// FuzzQueue decodes its input into a queue configuration and a sequence of
// operations — Enqueue with and without keys, groups, targets and
// priorities, EnqueueIn, Cancel, CancelMatch, Purge, Admit, Fanout,
// SetNextDue, Suspend/Disable/Resume, fake time passing, releasing blocked
// handlers, Start, Stop and Shutdown — with each job's handler outcomes
// (success, error, RetryAfter below and above the ceiling, Permanent,
// Overloaded, Disable, panic, block until released) taken from the input
// too. It runs them against a queue built inside a testing/synctest
// bubble and, after every step, checks the queue against a reference
// model (fuzzModel):
//
//   - every accepted job ends exactly once (done, dead or cancelled) or is
//     still ready, scheduled, waiting (a coalesced rerun) or running, and a
//     job never runs after it ended;
//   - a key never runs twice at once;
//   - no job runs before its RunAt, its retry time or its deferral;
//   - each run ends as its outcome says (done, retried, dead, superseded)
//     and uses an attempt exactly when it should;
//   - Enqueue, Cancel, CancelMatch and Purge return what the model
//     predicts (ErrDuplicate for a pending key or reserved group, a
//     coalesced rerun for a running key, ErrQueueFull exactly at capacity);
//   - Fanout returns only eligible targets, as many as its cap allows, and
//     Admit never refuses below its threshold;
//   - every counter matches the model, and queuetest.CheckCounts holds.
//
// The committed corpus (testdata/fuzz/FuzzQueue) runs as a normal test
// (QUEUE_FUZZ_LOG=1 logs each input's steps). A 30-second fuzzing run:
//
//	go test -run '^$' -fuzz '^FuzzQueue$' -fuzztime 30s .
//
// FuzzOptions builds queues from arbitrary option values: each either
// fails New with an *OptionError naming one of the options given, or
// starts, runs its jobs and stops within a bounded fake time:
//
//	go test -run '^$' -fuzz '^FuzzOptions$' -fuzztime 30s .

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/queuetest"
)

// fuzzBytes reads an input byte by byte; past its end it reads zeros.
type fuzzBytes struct {
	b []byte
	i int
}

func (in *fuzzBytes) byte() byte {
	if in.i >= len(in.b) {
		return 0
	}
	c := in.b[in.i]
	in.i++
	return c
}

func (in *fuzzBytes) more() bool { return in.i < len(in.b) }

// n returns a number in [0, k).
func (in *fuzzBytes) n(k int) int { return int(in.byte()) % k }

// pick returns one of xs.
func pick[E any](in *fuzzBytes, xs ...E) E { return xs[in.n(len(xs))] }

// fzOutcome is what one run of a fuzzed job's handler does.
type fzOutcome uint8

const (
	ocOK         fzOutcome = iota // return nil
	ocError                       // a plain error: backoff, then dead after the last attempt
	ocRetrySoon                   // RetryAfter below the ceiling
	ocRetryLate                   // RetryAfter at or above the ceiling: done
	ocPermanent                   // dead at once
	ocOverload                    // target suspended, job retried when it ends
	ocDisable                     // target disabled, job dead
	ocPanic                       // recovered: like an error
	ocBlock                       // wait until released (then nil) or until Shutdown
	ocBlockError                  // wait until released, then fail like ocError
	numOutcomes
)

var outcomeNames = [...]string{"ok", "error", "retry-soon", "retry-late", "permanent", "overload", "disable", "panic", "block", "block-error"}

func (o fzOutcome) String() string { return outcomeNames[o] }

// Fixed settings of the fuzzed queue; the input chooses the rest.
const (
	fzScaleInterval = 5 * time.Second
	fzBackoffBase   = time.Second
	fzBackoffMax    = 8 * time.Second
	fzSuspend       = 20 * time.Second
	fzRequeueDelay  = 3 * time.Second
	fzCeiling       = 10 * time.Minute
	fzMaxOps        = 48
)

var (
	fzKeys     = []string{"", "a", "b", "c", "d"}
	fzGroups   = []string{"", "g1", "g2"}
	fzTargets  = []string{"", "t1", "t2", "t3"}
	fzPrios    = []string{"", "high", "low"}
	fzDelays   = []time.Duration{0, 0, time.Second, 7 * time.Second, time.Minute, 30 * time.Minute}
	fzAdvances = []time.Duration{time.Millisecond, time.Second, 3 * time.Second, 10 * time.Second, time.Minute, 10 * time.Minute}
	fzRetryIn  = []time.Duration{time.Second, 5 * time.Second, 2 * time.Minute}
	fzCands    = []string{"t1", "t2", "t3"}
)

// fuzzConfig is the part of the queue's configuration the input chooses.
type fuzzConfig struct {
	capacity, base, max, maxAttempts int
	coalesce, metrics                bool
	admitPct                         int // WithRateLimit threshold (1 token/s, burst 1); 0: off
	fanoutMax, throttlePct           int // WithFanout(0, throttlePct, 1)
	startAfter                       int // ops before Start
}

func decodeFuzzConfig(in *fuzzBytes) fuzzConfig {
	c := fuzzConfig{
		capacity:    1 + in.n(5),
		base:        1 + in.n(3),
		maxAttempts: 1 + in.n(3),
		coalesce:    in.n(4) != 0,
		metrics:     in.n(4) == 0,
		admitPct:    pick(in, 0, 50, 100),
		fanoutMax:   1 + in.n(3),
		throttlePct: pick(in, 0, 50),
		startAfter:  pick(in, 0, 0, 1, 3),
	}
	c.max = c.base + in.n(2)
	return c
}

func (c fuzzConfig) options(m *fuzzModel) []queue.Option {
	opts := []queue.Option{
		queue.WithCapacity(c.capacity, 0),
		queue.WithWorkers(c.base, c.max),
		queue.WithRetry(c.maxAttempts, 0, 0),
		queue.WithCoalesce(c.coalesce),
		queue.WithScaling(queue.ScaleByFill, 0, 0, fzScaleInterval),
		queue.WithRetry(0, fzBackoffBase, fzBackoffMax),
		queue.WithSuspend(fzSuspend, nil),
		queue.WithRequeueDelay(fzRequeueDelay),
		queue.WithRetryAfterBounds(time.Second, fzCeiling),
		queue.WithRateLimit(queue.RateLimit{FillPct: c.admitPct, PerSecond: 1, Burst: 1}),
		queue.WithFanout(c.fanoutMax, c.throttlePct, 1),
		queue.WithObserver(m.observe),
	}
	if c.metrics {
		opts = append(opts, queue.WithMetrics(prometheus.NewRegistry(), 1))
	}
	return opts
}

type jobState uint8

const (
	jsRejected jobState = iota // Enqueue refused it
	jsPending                  // ready or scheduled (or running: see inHandler)
	jsRerun                    // a coalesced rerun waiting for its key
	jsEnded
)

// fuzzJob is the model of one job offered to Enqueue.
type fuzzJob struct {
	idx                   int
	id                    int64
	key, group, target    string
	prio                  string
	maxAttempts           int
	runAt                 time.Time // zero: ready when accepted
	groupHeld, groupFreed bool      // it reserved its group as a scheduled job; the reservation ended
	script                []fzOutcome
	retryIn               time.Duration
	coalesced             bool // accepted as the rerun of a running key

	state     jobState
	ended     queue.EventKind
	inHandler bool
	runs      int       // handler runs so far
	used      int       // attempts used: runs that ended in Retry (not Defer)
	notBefore time.Time // it must not start earlier
	last      fzOutcome // fzOutcome of the latest run
	expect    []queue.EventKind
}

type fuzzKey struct{ holder, rerun *fuzzJob }

type fuzzGate struct {
	job *fuzzJob
	ch  chan struct{}
}

// fuzzModel is the reference model. The handler and the observer update it
// from the queue's goroutines; the test goroutine reads it at quiescent
// points (after synctest.Wait) and never holds mu while calling the queue.
type fuzzModel struct {
	cfg    fuzzConfig
	single bool // at most one worker: target decisions can be checked strictly

	mu        sync.Mutex
	jobs      []*fuzzJob
	byID      map[int64]*fuzzJob
	orphans   map[int64][]queue.Event // events that arrived before their job's ID was known
	enqueuing *fuzzJob
	keys      map[string]*fuzzKey
	running   map[string]bool // keys whose handler is running
	gates     []fuzzGate
	noBlock   bool // Stop or the final drain: blocking outcomes return at once
	shutdown  bool
	disabled  map[string]bool
	suspended map[string]time.Time
	nextDue   map[string]map[string]time.Time // key -> target -> next due
	done      uint64
	dead      uint64
	cancelled uint64
	limited   uint64
	throttled uint64
	errs      []string
}

func newFuzzModel(cfg fuzzConfig) *fuzzModel {
	return &fuzzModel{
		cfg: cfg, single: cfg.max == 1,
		byID: map[int64]*fuzzJob{}, orphans: map[int64][]queue.Event{},
		keys: map[string]*fuzzKey{}, running: map[string]bool{},
		disabled: map[string]bool{}, suspended: map[string]time.Time{},
		nextDue: map[string]map[string]time.Time{},
	}
}

// failf records a violation; mu is held. The test goroutine reports it.
func (m *fuzzModel) failf(format string, args ...any) {
	m.errs = append(m.errs, fmt.Sprintf(format, args...))
}

func (m *fuzzModel) key(k string) *fuzzKey {
	fk := m.keys[k]
	if fk == nil {
		fk = &fuzzKey{}
		m.keys[k] = fk
	}
	return fk
}

func (j *fuzzJob) String() string {
	return fmt.Sprintf("job#%d(id %d key %q target %q state %d runs %d)", j.idx, j.id, j.key, j.target, j.state, j.runs)
}

func (j *fuzzJob) limit(def int) int {
	if j.maxAttempts > 0 {
		return j.maxAttempts
	}
	return def
}

// handle is the fuzzed queue's handler.
func (m *fuzzModel) handle(ctx context.Context, job queue.Job[int]) error {
	now := time.Now()
	m.mu.Lock()
	if job.Payload < 0 || job.Payload >= len(m.jobs) {
		m.failf("handler got unknown payload %d", job.Payload)
		m.mu.Unlock()
		return nil
	}
	j := m.jobs[job.Payload]
	m.checkStart(j, job, now)
	oc := ocOK
	if j.runs < len(j.script) {
		oc = j.script[j.runs]
	}
	j.runs++
	j.inHandler = true
	if j.key != "" {
		m.running[j.key] = true
	}
	var gate chan struct{}
	if (oc == ocBlock || oc == ocBlockError) && !m.noBlock {
		gate = make(chan struct{})
		m.gates = append(m.gates, fuzzGate{j, gate})
	}
	m.mu.Unlock()

	var err error
	switch oc {
	case ocError:
		err = errors.New("fuzz: failed")
	case ocRetrySoon:
		err = queue.RetryAfter(j.retryIn, errors.New("fuzz: come back later"))
	case ocRetryLate:
		err = queue.RetryAfter(fzCeiling+j.retryIn, nil)
	case ocPermanent:
		err = queue.Permanent(errors.New("fuzz: bad job"))
	case ocOverload:
		err = queue.Overloaded(errors.New("fuzz: 429"))
	case ocDisable:
		err = queue.Disable(errors.New("fuzz: 404"))
	case ocPanic:
		err = errFuzzPanic // what the queue makes of the panic below
	case ocBlock, ocBlockError:
		if gate != nil {
			select {
			case <-gate:
			case <-ctx.Done():
				err = ctx.Err()
			}
		}
		if err == nil && oc == ocBlockError {
			err = errors.New("fuzz: failed after a while")
		}
	}

	m.mu.Lock()
	if gate != nil {
		m.gates = slices.DeleteFunc(m.gates, func(g fuzzGate) bool { return g.ch == gate })
	}
	j.inHandler = false
	delete(m.running, j.key)
	j.last = oc
	j.expect = m.allowed(j, job, oc, err)
	m.mu.Unlock()
	if oc == ocPanic {
		panic(errFuzzPanic)
	}
	return err
}

// checkStart checks a run as it starts; mu is held.
func (m *fuzzModel) checkStart(j *fuzzJob, job queue.Job[int], now time.Time) {
	if j.id == 0 {
		j.id = job.ID // the handler may run before Enqueue's event arrives
		m.byID[job.ID] = j
	}
	if j.state == jsRerun {
		// The holder's run released the key (the store made this rerun
		// ready) before the holder's worker reported the outcome: fine if
		// that outcome ends the holder. Its event will hand the key over.
		h := m.keys[j.key].holder
		if h != nil && !h.inHandler && h.expect != nil &&
			!slices.Contains(h.expect, queue.EventRetried) && !slices.Contains(h.expect, queue.EventDeferred) {
			j.state = jsPending
		}
	}
	switch {
	case j.id != job.ID:
		m.failf("%v ran with ID %d", j, job.ID)
	case j.state == jsEnded:
		m.failf("%v ran after it ended as %v", j, j.ended)
	case j.state != jsPending:
		m.failf("%v ran in state %d", j, j.state)
	case j.inHandler:
		m.failf("%v runs twice at once", j)
	case j.expect != nil:
		m.failf("%v started before its previous run's outcome was reported", j)
	}
	if j.key != "" && m.running[j.key] {
		m.failf("key %q runs twice at once (%v)", j.key, j)
	}
	if now.Before(j.notBefore) {
		m.failf("%v ran at %v, before its time %v", j, now, j.notBefore)
	}
	if !job.RunAt.IsZero() && now.Before(job.RunAt) {
		m.failf("%v ran at %v, before its RunAt %v", j, now, job.RunAt)
	}
	if job.Key != j.key || job.Group != j.group || job.Target != j.target || job.MaxAttempts != j.maxAttempts {
		m.failf("%v ran with key %q group %q target %q max attempts %d", j, job.Key, job.Group, job.Target, job.MaxAttempts)
	}
	if want := cmpOr(j.prio, "normal"); job.Priority != want {
		m.failf("%v ran with priority %q, want %q", j, job.Priority, want)
	}
	if job.Attempt != j.used+1 {
		m.failf("%v ran as attempt %d, want %d", j, job.Attempt, j.used+1)
	}
	if m.single && j.target != "" {
		// With one worker no other run changes target health meanwhile.
		if m.disabled[j.target] {
			m.failf("%v ran while its target was disabled", j)
		}
		if now.Before(m.suspended[j.target]) {
			m.failf("%v ran while its target was suspended until %v", j, m.suspended[j.target])
		}
	}
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// allowed returns the events that may follow a run; mu is held.
func (m *fuzzModel) allowed(j *fuzzJob, job queue.Job[int], oc fzOutcome, err error) []queue.EventKind {
	superseded := j.key != "" && m.keys[j.key].rerun != nil
	again := queue.EventRetried // a run that goes round again, unless a rerun supersedes it
	if superseded {
		again = queue.EventCancelled
	}
	switch {
	case err == nil:
		return []queue.EventKind{queue.EventDone}
	case m.shutdown:
		// Shutdown interrupted it: put back as it was.
		if superseded {
			return []queue.EventKind{queue.EventCancelled}
		}
		return []queue.EventKind{queue.EventDeferred}
	}
	switch oc {
	case ocRetryLate:
		return []queue.EventKind{queue.EventDone}
	case ocPermanent, ocDisable:
		return []queue.EventKind{queue.EventDead}
	case ocError, ocPanic, ocBlockError, ocOverload:
		if job.Attempt >= j.limit(m.cfg.maxAttempts) {
			return []queue.EventKind{queue.EventDead}
		}
	}
	return []queue.EventKind{again}
}

// observe is the fuzzed queue's observer.
func (m *fuzzModel) observe(ev queue.Event) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch ev.Kind {
	case queue.EventEnqueued, queue.EventCoalesced:
		j := m.enqueuing
		if j == nil {
			m.failf("event %v outside Enqueue", ev.Kind)
			return
		}
		if j.id != 0 && j.id != ev.JobID {
			m.failf("%v enqueued as ID %d", j, ev.JobID)
		}
		j.id = ev.JobID
		m.byID[ev.JobID] = j
		for _, o := range m.orphans[ev.JobID] {
			m.jobEvent(j, o)
		}
		delete(m.orphans, ev.JobID)
	case queue.EventSuspended:
		if until := ev.Time.Add(ev.Delay); until.After(m.suspended[ev.Target]) {
			m.suspended[ev.Target] = until
		}
	case queue.EventDisabled:
		m.disabled[ev.Target] = true
	case queue.EventResumed:
		delete(m.disabled, ev.Target)
		delete(m.suspended, ev.Target)
	case queue.EventDone, queue.EventDead, queue.EventRetried, queue.EventDeferred, queue.EventRequeued, queue.EventCancelled:
		if ev.JobID == 0 {
			if ev.Kind != queue.EventCancelled {
				m.failf("event %v without a job ID", ev.Kind)
			}
			return // Cancel, CancelMatch, Purge: the test goroutine accounts for them
		}
		j := m.byID[ev.JobID]
		if j == nil {
			m.orphans[ev.JobID] = append(m.orphans[ev.JobID], ev)
			return
		}
		m.jobEvent(j, ev)
	}
}

// jobEvent applies an event about job j; mu is held.
func (m *fuzzModel) jobEvent(j *fuzzJob, ev queue.Event) {
	if j.state == jsEnded {
		m.failf("%v got %v after it ended as %v", j, ev.Kind, j.ended)
		return
	}
	if ev.Kind == queue.EventRequeued {
		if j.state != jsPending || j.inHandler {
			m.failf("%v requeued while not pending", j)
		}
		return
	}
	if j.expect != nil {
		if !slices.Contains(j.expect, ev.Kind) {
			m.failf("%v: run with outcome %v ended as %v (err %v), want one of %v", j, j.last, ev.Kind, ev.Err, j.expect)
		}
		j.expect = nil
		if ev.Kind == queue.EventRetried && (j.last == ocError || j.last == ocPanic || j.last == ocBlockError || j.last == ocOverload) {
			j.used++
		}
	} else {
		// Decided when the job was claimed: its target is suspended
		// (deferred) or disabled (cancelled), or Shutdown began.
		ok := m.shutdown && ev.Kind == queue.EventDeferred
		if j.target != "" {
			switch {
			case !m.single:
				ok = ok || ev.Kind == queue.EventDeferred || ev.Kind == queue.EventCancelled
			case ev.Kind == queue.EventDeferred:
				ok = ok || ev.Time.Before(m.suspended[j.target])
			case ev.Kind == queue.EventCancelled:
				ok = ok || m.disabled[j.target]
			}
		}
		if !ok {
			m.failf("%v: unexpected %v (err %v) when it was claimed", j, ev.Kind, ev.Err)
		}
	}
	switch ev.Kind {
	case queue.EventRetried, queue.EventDeferred:
		j.notBefore = ev.Time.Add(ev.Delay)
	case queue.EventDone, queue.EventDead, queue.EventCancelled:
		m.end(j, ev.Kind)
	}
}

// end records that j ended as kind; mu is held.
func (m *fuzzModel) end(j *fuzzJob, kind queue.EventKind) {
	if j.state == jsEnded {
		m.failf("%v ended twice: %v, then %v", j, j.ended, kind)
		return
	}
	j.state, j.ended = jsEnded, kind
	switch kind {
	case queue.EventDone:
		m.done++
	case queue.EventDead:
		m.dead++
	case queue.EventCancelled:
		m.cancelled++
	}
	if j.key == "" {
		return
	}
	fk := m.keys[j.key]
	switch j {
	case fk.holder:
		fk.holder, fk.rerun = fk.rerun, nil
		if fk.holder != nil {
			fk.holder.state = jsPending
		}
	case fk.rerun:
		fk.rerun = nil
	default:
		m.failf("%v ended but does not hold its key", j)
	}
}

var errFuzzPanic = errors.New("fuzz: handler panicked")

// fuzzRun is one execution of FuzzQueue: the queue, the model, the input.
type fuzzRun struct {
	t       *testing.T
	in      *fuzzBytes
	m       *fuzzModel
	q       *queue.Queue[int]
	started bool
	closed  bool // Stop or Shutdown was called
	ops     []string
}

func FuzzQueue(f *testing.F) {
	for _, seed := range fuzzQueueSeeds() {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		synctest.Test(t, func(t *testing.T) { runFuzzQueue(t, data) })
	})
}

func runFuzzQueue(t *testing.T, data []byte) {
	in := &fuzzBytes{b: data}
	cfg := decodeFuzzConfig(in)
	m := newFuzzModel(cfg)
	q, err := queue.New(m.handle, cfg.options(m)...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	r := &fuzzRun{t: t, in: in, m: m, q: q}
	t.Cleanup(r.cleanup)
	r.logf("config %+v", cfg)
	for op := 0; op < fzMaxOps && in.more(); op++ {
		if op == cfg.startAfter && !r.closed {
			r.start()
			queuetest.Settle()
			r.check()
		}
		r.step()
		queuetest.Settle()
		r.check()
	}
	r.finish()
	if os.Getenv("QUEUE_FUZZ_LOG") != "" {
		t.Logf("steps:\n  %s", strings.Join(r.ops, "\n  "))
	}
}

// logf records what happened, to be shown when the run fails.
func (r *fuzzRun) logf(format string, args ...any) {
	r.ops = append(r.ops, fmt.Sprintf("%8v  ", time.Since(fuzzEpoch()).Round(time.Millisecond))+fmt.Sprintf(format, args...))
}

// fuzzEpoch is the bubble's start (synctest starts every bubble at
// 2000-01-01 00:00 UTC).
func fuzzEpoch() time.Time { return time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC) }

func (r *fuzzRun) fatalf(format string, args ...any) {
	r.t.Helper()
	r.t.Fatalf("%s\nsteps:\n  %s", fmt.Sprintf(format, args...), strings.Join(r.ops, "\n  "))
}

// cleanup lets a failed run stop: blocked handlers are released and the
// queue shut down, so the bubble's goroutines exit.
func (r *fuzzRun) cleanup() {
	r.releaseAll()
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	_ = r.q.Shutdown(ctx)
}

func (r *fuzzRun) releaseAll() {
	r.m.mu.Lock()
	r.m.noBlock = true
	gates := r.m.gates
	r.m.gates = nil
	r.m.mu.Unlock()
	for _, g := range gates {
		close(g.ch)
	}
}

func (r *fuzzRun) start() {
	err := r.q.Start(context.Background())
	r.logf("Start: %v", err)
	switch {
	case r.closed:
		if !errors.Is(err, queue.ErrClosed) {
			r.fatalf("Start after Stop: %v, want ErrClosed", err)
		}
	case r.started:
		if !errors.Is(err, queue.ErrStarted) {
			r.fatalf("second Start: %v, want ErrStarted", err)
		}
	case err != nil:
		r.fatalf("Start: %v", err)
	default:
		r.started = true
	}
}

func (r *fuzzRun) step() {
	in := r.in
	switch c := in.n(16); {
	case c < 4:
		r.enqueue()
	case c == 4:
		r.cancel(pick(in, fzKeys...))
	case c == 5:
		r.cancelMatch(in.byte())
	case c == 6:
		r.admit()
	case c == 7:
		r.fanout(pick(in, fzKeys...))
	case c < 10:
		d := pick(in, fzAdvances...)
		r.logf("advance %v", d)
		queuetest.Advance(d)
	case c < 12:
		r.release(in.byte())
	case c == 12:
		r.purge()
	case c == 13:
		r.targetOp()
	case c == 14:
		r.setNextDue()
	default:
		switch in.n(6) {
		case 0:
			r.stop(false)
		case 1:
			r.stop(true)
		default:
			r.start()
		}
	}
}

// updateGroups ends the group reservations of scheduled jobs that the
// scheduler has promoted: it runs only between Start and Stop.
func (r *fuzzRun) updateGroups(now time.Time) {
	if !r.started || r.closed {
		return
	}
	for _, j := range r.m.jobs {
		if j.groupHeld && !j.groupFreed && !now.Before(j.runAt) {
			j.groupFreed = true
		}
	}
}

func (r *fuzzRun) groupHeld(group string) bool {
	for _, j := range r.m.jobs {
		if j.group == group && j.groupHeld && !j.groupFreed && j.state != jsEnded {
			return true
		}
	}
	return false
}

func (r *fuzzRun) enqueue() {
	in := r.in
	j := &fuzzJob{
		key: pick(in, fzKeys...), group: pick(in, fzGroups...), target: pick(in, fzTargets...),
		prio: pick(in, fzPrios...), maxAttempts: pick(in, 0, 0, 1, 2), retryIn: pick(in, fzRetryIn...),
	}
	for range in.n(4) {
		j.script = append(j.script, fzOutcome(in.n(int(numOutcomes))))
	}
	delay := pick(in, fzDelays...)
	now := time.Now()
	if delay > 0 {
		j.runAt = now.Add(delay)
	}
	j.notBefore = j.runAt
	job := queue.Job[int]{Key: j.key, Group: j.group, Target: j.target, Priority: j.prio, MaxAttempts: j.maxAttempts}

	// What the model expects.
	st := r.q.Stats()
	m := r.m
	m.mu.Lock()
	var want error
	coalesce := false
	fk := m.keys[j.key]
	switch {
	case r.closed:
		want = queue.ErrClosed
	case j.key != "" && fk != nil && fk.holder != nil:
		if fk.holder.inHandler && fk.rerun == nil && r.m.cfg.coalesce {
			coalesce = true
		} else {
			want = queue.ErrDuplicate
		}
	case delay > 0:
		if j.group != "" && r.groupHeld(j.group) {
			want = queue.ErrDuplicate
		}
		j.groupHeld = j.group != ""
	case st.Depth >= m.cfg.capacity:
		want = queue.ErrQueueFull
	}
	// The model takes the prediction as fact before the call, since a
	// worker may run the job before Enqueue returns; a wrong prediction
	// fails the run below.
	j.idx = len(m.jobs)
	m.jobs = append(m.jobs, j)
	m.enqueuing = j
	switch {
	case want != nil:
		j.state, j.groupHeld = jsRejected, false
	case coalesce:
		j.state, j.coalesced = jsRerun, true
		m.key(j.key).rerun = j
	default:
		j.state = jsPending
		if j.key != "" {
			m.key(j.key).holder = j
		}
	}
	m.mu.Unlock()

	job.Payload = j.idx
	var err error
	switch {
	case delay > 0:
		err = r.q.EnqueueIn(context.Background(), job, delay)
	case in.n(4) == 0:
		err = r.q.EnqueueAt(context.Background(), job, now.Add(-time.Minute)) // a past time is now
	default:
		err = r.q.Enqueue(context.Background(), job)
	}
	r.logf("enqueue #%d key %q group %q target %q prio %q max %d in %v script %v: %v (want %v, coalesce %v)",
		j.idx, j.key, j.group, j.target, j.prio, j.maxAttempts, delay, j.script, err, want, coalesce)

	m.mu.Lock()
	m.enqueuing = nil
	if err == nil && j.id == 0 {
		m.failf("%v accepted without an enqueued or coalesced event", j)
	}
	m.mu.Unlock()
	if !errors.Is(err, want) || (want == nil) != (err == nil) {
		r.fatalf("Enqueue #%d: got %v, want %v", j.idx, err, want)
	}
}

// cancellable returns the job Cancel(key) should cancel, or nil; mu is held.
func (r *fuzzRun) cancellable(key string) *fuzzJob {
	fk := r.m.keys[key]
	switch {
	case key == "" || fk == nil || fk.holder == nil:
		return nil
	case !fk.holder.inHandler:
		return fk.holder
	default:
		return fk.rerun // may be nil
	}
}

func (r *fuzzRun) cancel(key string) {
	r.m.mu.Lock()
	victim := r.cancellable(key)
	r.m.mu.Unlock()
	n, err := r.q.Cancel(context.Background(), key)
	r.logf("Cancel(%q): %d, %v (want %v)", key, n, err, victim)
	if err != nil || n != b2i(victim != nil) {
		r.fatalf("Cancel(%q) = %d, %v; the model cancels %v", key, n, err, victim)
	}
	r.m.mu.Lock()
	if victim != nil {
		r.m.end(victim, queue.EventCancelled)
	}
	r.m.mu.Unlock()
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (r *fuzzRun) cancelMatch(mask byte) {
	match := func(key string) bool {
		i := slices.Index(fzKeys, key)
		return i > 0 && mask&(1<<i) != 0
	}
	r.m.mu.Lock()
	var victims []*fuzzJob
	for k := range r.m.keys {
		if v := r.cancellable(k); v != nil && match(k) {
			victims = append(victims, v)
		}
	}
	r.m.mu.Unlock()
	n, err := r.q.CancelMatch(context.Background(), match)
	r.logf("CancelMatch(%05b): %d, %v (want %d)", mask&0x1e, n, err, len(victims))
	if err != nil || n != len(victims) {
		r.fatalf("CancelMatch = %d, %v; the model cancels %v", n, err, victims)
	}
	r.m.mu.Lock()
	for _, v := range victims {
		r.m.end(v, queue.EventCancelled)
	}
	r.m.mu.Unlock()
}

func (r *fuzzRun) purge() {
	r.m.mu.Lock()
	var victims []*fuzzJob
	for _, j := range r.m.jobs {
		if (j.state == jsPending && !j.inHandler) || j.state == jsRerun {
			victims = append(victims, j)
		}
	}
	r.m.mu.Unlock()
	n, err := r.q.Purge(context.Background())
	r.logf("Purge: %d, %v (want %d)", n, err, len(victims))
	if err != nil || n != len(victims) {
		r.fatalf("Purge = %d, %v; the model purges %v", n, err, victims)
	}
	// A pending holder never has a rerun (reruns wait for running keys),
	// so the order of these ends does not matter.
	r.m.mu.Lock()
	for _, v := range victims {
		r.m.end(v, queue.EventCancelled)
	}
	r.m.mu.Unlock()
}

func (r *fuzzRun) admit() {
	st := r.q.Stats()
	err := r.q.Admit()
	r.logf("Admit at depth %d: %v", st.Depth, err)
	pct := r.m.cfg.admitPct
	if err == nil {
		return
	}
	if pct == 0 || st.Depth*100 < pct*r.m.cfg.capacity {
		r.fatalf("Admit refused below its threshold (depth %d, capacity %d, threshold %d%%): %v", st.Depth, r.m.cfg.capacity, pct, err)
	}
	if d, ok := queue.RetryDelay(err); !errors.Is(err, queue.ErrRateLimited) || !ok || d != 10*time.Second {
		r.fatalf("Admit: %v, want a refusal with the default 10s retry hint", err)
	}
	r.m.mu.Lock()
	r.m.limited++
	r.m.mu.Unlock()
}

func (r *fuzzRun) fanout(key string) {
	st := r.q.Stats()
	now := time.Now()
	got := r.q.Fanout(key, fzCands)
	m := r.m
	m.mu.Lock()
	defer m.mu.Unlock()
	var eligible []string
	for _, c := range fzCands {
		if !m.disabled[c] && !now.Before(m.suspended[c]) && !now.Before(m.nextDue[key][c]) {
			eligible = append(eligible, c)
		}
	}
	limit := m.cfg.fanoutMax
	if p := m.cfg.throttlePct; p > 0 && st.Depth*100 >= p*m.cfg.capacity && 1 < limit {
		limit = 1
		m.throttled += uint64(max(len(eligible)-limit, 0))
	}
	r.logf("Fanout(%q) at depth %d: %v (eligible %v, limit %d)", key, st.Depth, got, eligible, limit)
	if len(got) != min(limit, len(eligible)) {
		r.fatalf("Fanout(%q) = %v: want %d of %v", key, got, min(limit, len(eligible)), eligible)
	}
	for i, g := range got {
		if !slices.Contains(eligible, g) || slices.Contains(got[:i], g) {
			r.fatalf("Fanout(%q) = %v: %q is not eligible or repeated (eligible %v)", key, got, g, eligible)
		}
	}
}

func (r *fuzzRun) setNextDue() {
	in := r.in
	target, key := pick(in, fzCands...), pick(in, fzKeys...)
	d := pick(in, 0, 5*time.Second, time.Minute)
	now := time.Now()
	at := time.Time{}
	if d > 0 {
		at = now.Add(d)
	}
	r.q.SetNextDue(target, key, at)
	r.logf("SetNextDue(%q, %q, +%v)", target, key, d)
	r.m.mu.Lock()
	defer r.m.mu.Unlock()
	if r.m.nextDue[key] == nil {
		r.m.nextDue[key] = map[string]time.Time{}
	}
	r.m.nextDue[key][target] = at
	if due := r.q.Due(target, key); due != (d == 0) {
		r.fatalf("Due(%q, %q) = %v after SetNextDue(+%v)", target, key, due, d)
	}
}

func (r *fuzzRun) targetOp() {
	in := r.in
	target := pick(in, fzCands...)
	switch in.n(3) {
	case 0:
		d := pick(in, 0, 5*time.Second, time.Minute)
		err := r.q.Suspend(target, d)
		r.logf("Suspend(%q, %v): %v", target, d, err)
		if err != nil {
			r.fatalf("Suspend: %v", err)
		}
	case 1:
		err := r.q.Disable(target, errors.New("fuzz: disabled by the host"))
		r.logf("Disable(%q): %v", target, err)
		if err != nil {
			r.fatalf("Disable: %v", err)
		}
	default:
		err := r.q.Resume(target)
		r.logf("Resume(%q): %v", target, err)
		if err != nil && !errors.Is(err, queue.ErrUnknownTarget) {
			r.fatalf("Resume: %v", err)
		}
	}
}

func (r *fuzzRun) release(b byte) {
	r.m.mu.Lock()
	if len(r.m.gates) == 0 {
		r.m.mu.Unlock()
		r.logf("release: nothing blocked")
		return
	}
	i := int(b) % len(r.m.gates)
	g := r.m.gates[i]
	r.m.gates = slices.Delete(r.m.gates, i, i+1)
	r.m.mu.Unlock()
	r.logf("release %v", g.job)
	close(g.ch)
}

// stop calls Stop (after releasing blocked handlers, which Stop would
// wait for) or Shutdown (which interrupts them).
func (r *fuzzRun) stop(shutdown bool) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	var err error
	if shutdown {
		r.m.mu.Lock()
		r.m.shutdown = true
		r.m.mu.Unlock()
		err = r.q.Shutdown(ctx)
	} else {
		r.releaseAll()
		err = r.q.Stop(ctx)
	}
	r.logf("stop (shutdown %v): %v", shutdown, err)
	r.closed = true
	if err != nil {
		r.fatalf("stop (shutdown %v) = %v: a queue whose handlers return must stop at once", shutdown, err)
	}
	select {
	case <-r.q.Done():
	default:
		r.fatalf("Done not closed after stop returned")
	}
}

// check compares the queue with the model at a quiescent point.
func (r *fuzzRun) check() {
	r.t.Helper()
	now := time.Now()
	st := r.q.Stats()
	m := r.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.errs) > 0 {
		r.fatalf("model violations:\n  %s", strings.Join(m.errs, "\n  "))
	}
	r.updateGroups(now)
	var accepted, pending, reruns, running, keys int
	for _, j := range m.jobs {
		switch j.state {
		case jsPending:
			accepted++
			if j.inHandler {
				running++
			} else {
				pending++
			}
			if !m.noBlock && j.inHandler && !slices.ContainsFunc(m.gates, func(g fuzzGate) bool { return g.job == j }) {
				r.fatalf("%v is running at a quiescent point without being blocked", j)
			}
		case jsRerun:
			accepted++
			reruns++
		case jsEnded:
			accepted++
		}
	}
	for _, fk := range m.keys {
		keys += b2i(fk.holder != nil)
	}
	if len(m.orphans) > 0 {
		r.fatalf("events for unknown job IDs: %v", m.orphans)
	}
	type pair struct {
		what      string
		got, want uint64
	}
	for _, p := range []pair{
		{"enqueued", st.Enqueued, uint64(accepted)},
		{"done", st.Done, m.done},
		{"dead", st.Dead, m.dead},
		{"cancelled", st.Cancelled, m.cancelled},
		{"running", uint64(st.Running), uint64(running)},
		{"waiting", uint64(st.Store.Waiting), uint64(reruns)},
		{"ready+scheduled", uint64(st.Depth + st.Store.Scheduled), uint64(pending)},
		{"pending keys", uint64(st.Store.PendingKeys), uint64(keys)},
		{"rate limited", st.RateLimited, m.limited},
		{"throttled", st.Throttled, m.throttled},
		{"coalesced", st.Coalesced, uint64(r.coalesced())},
	} {
		if p.got != p.want {
			r.fatalf("stats %s = %d, model says %d (stats %+v)", p.what, p.got, p.want, st.Counts)
		}
	}
	queuetest.CheckCounts(r.t, r.q)
}

// coalesced counts the jobs accepted as reruns; mu is held.
func (r *fuzzRun) coalesced() int {
	n := 0
	for _, j := range r.m.jobs {
		if j.coalesced {
			n++
		}
	}
	return n
}

// finish lets everything run out (releasing blocked handlers and letting
// time pass), stops the queue and checks that every accepted job ended,
// or, if the queue had been stopped, that the rest are still in the store.
func (r *fuzzRun) finish() {
	if !r.started && !r.closed {
		r.start()
		queuetest.Settle()
		r.check()
	}
	r.releaseAll()
	for i := 0; i < 100 && !r.closed && r.live() > 0; i++ {
		d := time.Second
		if next := r.q.Stats().NextScheduled; len(next) > 0 && time.Until(next[0].RunAt) > 0 {
			d = time.Until(next[0].RunAt)
		}
		r.logf("finish: advance %v", d)
		queuetest.Advance(d)
		r.check()
	}
	wasClosed := r.closed
	if !r.closed {
		r.stop(false)
		queuetest.Settle()
		r.check()
	}
	st := r.q.Stats()
	if st.Running != 0 || st.Store.Waiting != 0 {
		r.fatalf("stopped queue still has %d running and %d waiting jobs", st.Running, st.Store.Waiting)
	}
	if n := r.live(); !wasClosed && n > 0 {
		r.fatalf("%d accepted jobs never ended though time ran on and every outcome ends", n)
	}
	if err := r.q.Stop(context.Background()); err != nil {
		r.fatalf("Stop again: %v", err)
	}
}

// live counts the accepted jobs that have not ended.
func (r *fuzzRun) live() int {
	r.m.mu.Lock()
	defer r.m.mu.Unlock()
	n := 0
	for _, j := range r.m.jobs {
		if j.state == jsPending || j.state == jsRerun {
			n++
		}
	}
	return n
}

// fuzzSeed writes FuzzQueue inputs by name rather than by byte.
type fuzzSeed struct{ b []byte }

// config writes a configuration: capacity 1..5, workers base..base+extra,
// max attempts 1..3; admit and throttle are indices into their tables.
func (s *fuzzSeed) config(capacity, base, extra, maxAttempts int, coalesce, metrics bool, admit, fanoutMax, throttle, startAfter int) *fuzzSeed {
	s.b = append(s.b, byte(capacity-1), byte(base-1), byte(maxAttempts-1), byte(b2i(coalesce)), byte(1-b2i(metrics)),
		byte(admit), byte(fanoutMax-1), byte(throttle), byte(startAfter), byte(extra))
	return s
}

// enqueue writes an Enqueue; key, group, target, prio, retryIn and delay
// are indices into their tables (fzKeys, …), maxAttempts 0..2.
func (s *fuzzSeed) enqueue(key, group, target, prio, maxAttempts, retryIn, delay int, script ...fzOutcome) *fuzzSeed {
	s.b = append(s.b, 0, byte(key), byte(group), byte(target), byte(prio), byte(min(maxAttempts+1, 3)), byte(retryIn), byte(len(script)))
	for _, o := range script {
		s.b = append(s.b, byte(o))
	}
	s.b = append(s.b, byte(delay))
	if fzDelays[delay] == 0 {
		s.b = append(s.b, 1) // Enqueue, not EnqueueAt
	}
	return s
}

func (s *fuzzSeed) op(b ...byte) *fuzzSeed { s.b = append(s.b, b...); return s }

func (s *fuzzSeed) cancel(key int) *fuzzSeed        { return s.op(4, byte(key)) }
func (s *fuzzSeed) cancelMatch(mask byte) *fuzzSeed { return s.op(5, mask) }
func (s *fuzzSeed) admit() *fuzzSeed                { return s.op(6) }
func (s *fuzzSeed) fanout(key int) *fuzzSeed        { return s.op(7, byte(key)) }
func (s *fuzzSeed) advance(i int) *fuzzSeed         { return s.op(8, byte(i)) }
func (s *fuzzSeed) release(i int) *fuzzSeed         { return s.op(10, byte(i)) }
func (s *fuzzSeed) purge() *fuzzSeed                { return s.op(12) }
func (s *fuzzSeed) suspend(target, d int) *fuzzSeed { return s.op(13, byte(target), 0, byte(d)) }
func (s *fuzzSeed) disable(target int) *fuzzSeed    { return s.op(13, byte(target), 1) }
func (s *fuzzSeed) resume(target int) *fuzzSeed     { return s.op(13, byte(target), 2) }
func (s *fuzzSeed) nextDue(target, key, d int) *fuzzSeed {
	return s.op(14, byte(target), byte(key), byte(d))
}
func (s *fuzzSeed) stop() *fuzzSeed     { return s.op(15, 0) }
func (s *fuzzSeed) shutdown() *fuzzSeed { return s.op(15, 1) }
func (s *fuzzSeed) start() *fuzzSeed    { return s.op(15, 2) }

// fuzzQueueSeeds are hand-written scenarios; the committed corpus in
// testdata/fuzz/FuzzQueue adds inputs the fuzzer found interesting.
func fuzzQueueSeeds() [][]byte {
	const a, b, c = 1, 2, 3 // keys
	const g1 = 1            // group
	const t1, t2 = 1, 2     // targets, in fzTargets; the target ops take fzCands indices (t-1)
	var seeds []*fuzzSeed
	add := func() *fuzzSeed { s := &fuzzSeed{}; seeds = append(seeds, s); return s }

	// Every outcome once, one worker, then time runs out.
	s := add().config(4, 1, 0, 2, true, false, 0, 3, 0, 0)
	for o := range numOutcomes {
		if o != ocBlock && o != ocBlockError {
			s.enqueue(0, 0, 0, 0, 0, 0, 0, o).advance(3)
		}
	}
	s.advance(4)

	// Coalescing: a blocked holder, its rerun, a duplicate, a cancelled
	// rerun, a new rerun, then a failure that the rerun supersedes.
	add().config(3, 1, 0, 3, true, false, 0, 3, 0, 0).
		enqueue(a, 0, 0, 0, 0, 0, 0, ocBlockError).enqueue(a, 0, 0, 0, 0, 0, 0).enqueue(a, 0, 0, 0, 0, 0, 0).
		cancel(a).enqueue(a, 0, 0, 0, 0, 0, 2, ocError).release(0).advance(2).advance(3)

	// Coalescing off: a running key refuses.
	add().config(3, 2, 0, 1, false, true, 0, 3, 0, 0).
		enqueue(a, 0, 0, 0, 0, 0, 0, ocBlock).enqueue(a, 0, 0, 0, 0, 0, 0).release(0).enqueue(a, 0, 0, 0, 0, 0, 0)

	// Groups of scheduled jobs, and scheduling before Start.
	add().config(4, 1, 1, 2, true, false, 0, 3, 0, 3).
		enqueue(0, g1, 0, 0, 0, 0, 4).enqueue(b, g1, 0, 0, 0, 0, 3).advance(4).
		enqueue(0, g1, 0, 0, 0, 0, 2).cancel(b).advance(2)

	// A full ready queue: refusals, cancelled slots, priorities.
	add().config(2, 1, 0, 1, true, false, 2, 3, 1, 0).
		enqueue(a, 0, 0, 0, 0, 0, 0, ocBlock).enqueue(b, 0, 0, 1, 0, 0, 0).enqueue(c, 0, 0, 2, 0, 0, 0).
		admit().admit().fanout(a).enqueue(0, 0, 0, 0, 0, 0, 0).cancel(b).cancel(c).
		enqueue(b, 0, 0, 0, 0, 0, 0).enqueue(c, 0, 0, 0, 0, 0, 0).cancel(b).cancel(c).
		enqueue(b, 0, 0, 0, 0, 0, 0).enqueue(c, 0, 0, 0, 0, 0, 0).cancelMatch(0xff).
		enqueue(b, 0, 0, 0, 0, 0, 0).release(0)

	// Target health: overload, disable, suspend, resume, fan-out, due times.
	add().config(5, 1, 0, 3, true, false, 0, 3, 0, 0).
		enqueue(a, 0, t1, 0, 0, 0, 0, ocOverload).enqueue(b, 0, t1, 0, 0, 0, 0).fanout(a).
		enqueue(c, 0, t2, 0, 0, 0, 0, ocDisable).enqueue(0, 0, t2, 0, 0, 0, 0).fanout(a).
		nextDue(t2-1, a, 2).fanout(a).advance(3).advance(3).fanout(a).resume(t2-1).suspend(t1-1, 1).fanout(b).
		disable(t1-1).enqueue(a, 0, t1, 0, 0, 0, 0).resume(t1 - 1).advance(4)

	// Stop keeps scheduled jobs and runs ready ones; enqueue after it fails.
	add().config(3, 2, 1, 2, true, true, 0, 3, 0, 0).
		enqueue(a, 0, 0, 0, 0, 0, 0, ocBlock).enqueue(b, 0, 0, 0, 0, 0, 4).enqueue(0, 0, 0, 0, 0, 0, 0, ocError).
		enqueue(a, 0, 0, 0, 0, 0, 0).stop().enqueue(c, 0, 0, 0, 0, 0, 0).advance(5).cancel(b).start()

	// Shutdown interrupts blocked handlers and supersedes a holder's deferral.
	add().config(3, 2, 0, 2, true, false, 0, 3, 0, 0).
		enqueue(a, 0, 0, 0, 0, 0, 0, ocBlock).enqueue(b, 0, 0, 0, 0, 0, 0, ocBlock).enqueue(a, 0, 0, 0, 0, 0, 0).
		shutdown().advance(3).purge()

	// Retries past the attempt limit, RetryAfter and a purge of reruns.
	add().config(4, 3, 0, 2, true, false, 0, 3, 0, 1).
		enqueue(a, 0, 0, 0, 2, 1, 0, ocError, ocPanic, ocError).enqueue(b, 0, 0, 0, 0, 2, 0, ocRetrySoon, ocRetrySoon).
		enqueue(c, 0, 0, 0, 0, 0, 0, ocBlock).enqueue(c, 0, 0, 0, 0, 0, 0).advance(2).purge().release(0).advance(4)

	out := make([][]byte, len(seeds))
	for i, s := range seeds {
		out[i] = s.b
	}
	return out
}

// Tables of values FuzzOptions draws from: valid, boundary and invalid.
var (
	foInts      = []int{-1, 0, 1, 2, 3, 7, 33, 1000}
	foCaps      = []int{-1, 0, 1, 2, 5, 1000, 1<<23 + 1 /* above the in-memory store's limit */, math.MaxInt}
	foWorkers   = []int{-1, 0, 1, 2, 4}
	foPcts      = []int{-1, 0, 1, 50, 99, 100, 101}
	foRates     = []float64{-1, 0, math.NaN(), 0.5, 1, 100, math.Inf(1)}
	foLabels    = []string{"", "x", "high", "normal", "low"}
	foWeights   = []int{-1, 0, 5, 10}
	foDurations = []time.Duration{-time.Second, 0, 1, time.Millisecond, time.Second, time.Minute, time.Hour,
		1<<62 + 1, math.MaxInt64}
)

// foOption decodes one option and the name New should use if it rejects
// it ("" for a nil Option).
func foOption(in *fuzzBytes) (queue.Option, string) {
	dur := func() time.Duration { return pick(in, foDurations...) }
	switch in.n(34) {
	case 0:
		return queue.WithName(pick(in, foLabels...)), "WithName"
	case 1:
		return queue.WithCapacity(pick(in, foCaps...), 0), "WithCapacity"
	case 2:
		return queue.WithWorkers(pick(in, foWorkers...), pick(in, foWorkers...)), "WithWorkers"
	case 3:
		return queue.WithScaling(queue.ScaleByFill, pick(in, foPcts...), pick(in, foPcts...), 0), "WithScaling"
	case 4:
		return queue.WithScaling(queue.ScaleByFill, 0, 0, dur()), "WithScaling"
	case 5:
		return queue.WithScaling(queue.ScalePolicy(in.n(4)-1), 0, 0, 0), "WithScaling"
	case 6:
		return queue.WithRequeueDelay(dur()), "WithRequeueDelay"
	case 7:
		levels := make([]queue.Priority, in.n(4))
		for i := range levels {
			levels[i] = queue.Priority{Name: pick(in, foLabels...), Weight: pick(in, foWeights...)}
		}
		return queue.WithPriorities("", levels...), "WithPriorities"
	case 8:
		return queue.WithPriorities(pick(in, foLabels...), queue.DefaultPriorities()...), "WithPriorities"
	case 9:
		return queue.WithCoalesce(in.n(2) == 0), "WithCoalesce"
	case 10:
		return queue.WithRetry(pick(in, foInts...), 0, 0), "WithRetry"
	case 11:
		return queue.WithRetry(0, dur(), dur()), "WithRetry"
	case 12:
		return queue.WithRetryAfterBounds(dur(), dur()), "WithRetryAfterBounds"
	case 13:
		return queue.WithJobTimeout(dur()), "WithJobTimeout"
	case 14:
		return queue.WithClock(pick[queue.Clock](in, nil, timeClock{})), "WithClock"
	case 15:
		loggers := []*slog.Logger{nil, slog.New(slog.DiscardHandler),
			slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelDebug}))}
		return queue.WithLogger(pick(in, loggers...)), "WithLogger"
	case 16:
		// Formerly WithStore, now NewWithStore's argument, whose payload
		// type the compiler checks: all of the scaling option at once.
		return queue.WithScaling(queue.ScalePolicy(in.n(4)-1), pick(in, foPcts...), pick(in, foPcts...), dur()), "WithScaling"
	case 17:
		// Formerly WithOnDead, now a method whose hook type the compiler
		// checks: all of the retry option at once.
		return queue.WithRetry(pick(in, foInts...), dur(), dur()), "WithRetry"
	case 18:
		return queue.WithRateLimit(queue.RateLimit{FillPct: pick(in, foPcts...), PerSecond: pick(in, foRates...), Burst: pick(in, foInts...)}), "WithRateLimit"
	case 19:
		return queue.WithRateLimit(queue.RateLimit{RetryAfter: dur(), Reason: pick(in, "", "busy", "server busy")}), "WithRateLimit"
	case 20:
		return queue.WithSuspend(dur(), nil), "WithSuspend"
	case 21:
		return queue.WithDisableAfter(pick(in, foInts...)), "WithDisableAfter"
	case 22:
		return queue.WithCircuitBreaker(pick(in, foInts...), dur(), pick(in, foInts...)), "WithCircuitBreaker"
	case 23:
		return queue.WithTargetConcurrency(pick(in, foInts...)), "WithTargetConcurrency"
	case 24:
		fns := []func(int, error) bool{nil, func(status int, _ error) bool { return status == 503 }}
		return queue.WithSuspend(0, pick(in, fns...)), "WithSuspend"
	case 25:
		return queue.WithFanout(pick(in, foInts...), 0, 0), "WithFanout"
	case 26:
		return queue.WithFanout(0, pick(in, foPcts...), pick(in, foInts...)), "WithFanout"
	case 27:
		fns := []func(int, func(int, int)){nil, func(int, func(int, int)) {}}
		return queue.WithShuffle(pick(in, fns...)), "WithShuffle"
	case 28:
		if in.n(2) == 0 {
			return queue.WithMetrics(nil, 0), "WithMetrics"
		}
		return queue.WithMetrics(prometheus.NewRegistry(), 0), "WithMetrics"
	case 29:
		return queue.WithMetrics(nil, pick(in, foInts...)), "WithMetrics"
	case 30:
		fns := []func(queue.Event){nil, func(queue.Event) {}}
		return queue.WithObserver(pick(in, fns...)), "WithObserver"
	case 31:
		return queue.WithWarnDepth(pick(in, foInts...)), "WithWarnDepth"
	case 32:
		return queue.WithCapacity(pick(in, foCaps...), pick(in, foCaps...)), "WithCapacity"
	default:
		return nil, ""
	}
}

// foJob is one job FuzzOptions enqueues: what its first run returns.
type foJob struct {
	key, target string
	delay       time.Duration
	first       int // index into foOutcomes
}

var foOutcomes = []string{"ok", "error", "retry", "overload", "permanent", "panic", "disable"}

func FuzzOptions(f *testing.F) {
	// An input is: how many options, each option (its kind, a case of
	// foOption, then indices into the value tables), how many jobs less
	// one, and each job (key, target, delay, first outcome).
	seed := func(opts [][]byte, jobs ...[4]byte) []byte {
		b := []byte{byte(len(opts))}
		for _, o := range opts {
			b = append(b, o...)
		}
		b = append(b, byte(max(len(jobs)-1, 0)))
		for _, j := range jobs {
			b = append(b, j[:]...)
		}
		return b
	}
	ok, fail, retry, overload := [4]byte{0, 0, 0, 0}, [4]byte{1, 1, 0, 1}, [4]byte{2, 2, 2, 2}, [4]byte{0, 1, 0, 3}
	f.Add(seed(nil, ok))
	f.Add(seed([][]byte{{1, 2}, {2, 2, 2}, {10, 2}, {18, 5, 3, 2}}, ok, fail, retry, overload, ok))              // capacity 1, one worker, rate limit at 99 %
	f.Add(seed([][]byte{{7, 2, 2, 1, 3, 2}, {8, 2}}, ok, fail))                                                  // two priorities, the default label set
	f.Add(seed([][]byte{{7, 1, 0, 0}}, ok))                                                                      // a level without a name
	f.Add(seed([][]byte{{11, 7, 8}, {10, 5}, {4, 8}}, fail, fail, ok))                                           // extreme backoff
	f.Add(seed([][]byte{{20, 8}, {22, 2, 8, 2}, {23, 2}, {26, 3, 2}, {19, 8}}, overload, fail, retry, ok))       // extreme suspension, breaker, concurrency, throttle
	f.Add(seed([][]byte{{16, 2}, {17, 2}, {32}}, ok))                                                            // mismatched store and hook, a nil Option
	f.Add(seed([][]byte{{13, 3}, {15, 2}, {28, 1}, {29, 2}, {30, 1}, {31, 2}, {4, 3}, {5, 2}}, ok, fail, retry)) // job timeout, logs, metrics, scale by depth
	f.Add(seed([][]byte{{2, 4, 2}, {3, 1, 5}, {14, 0}, {24, 0}, {27, 0}, {0, 0}, {6, 0}, {12, 0}}, ok))          // invalid values
	f.Fuzz(func(t *testing.T, data []byte) {
		synctest.Test(t, func(t *testing.T) { runFuzzOptions(t, data) })
	})
}

func runFuzzOptions(t *testing.T, data []byte) {
	in := &fuzzBytes{b: data}
	var (
		opts  []queue.Option
		names []string
	)
	for range in.n(12) {
		o, name := foOption(in)
		opts = append(opts, o)
		names = append(names, name)
	}
	var jobs []foJob
	for range 1 + in.n(6) {
		jobs = append(jobs, foJob{key: pick(in, "", "a", "b"), target: pick(in, "", "t", "u"),
			delay: pick(in, 0, 0, time.Second), first: in.n(len(foOutcomes))})
	}
	var mu sync.Mutex
	runs := make([]int, len(jobs))
	handler := func(_ context.Context, job queue.Job[int]) error {
		mu.Lock()
		runs[job.Payload]++
		n := runs[job.Payload]
		mu.Unlock()
		if n > 1 {
			return nil
		}
		switch foOutcomes[jobs[job.Payload].first] {
		case "error":
			return errors.New("fuzz: failed")
		case "retry":
			return queue.RetryAfter(time.Second, nil)
		case "overload":
			return queue.Overloaded(nil)
		case "permanent":
			return queue.Permanent(errors.New("fuzz: bad"))
		case "panic":
			panic("fuzz: panic")
		case "disable":
			return queue.Disable(nil)
		}
		return nil
	}

	q, err := queue.New(handler, opts...)
	if err != nil {
		var oe *queue.OptionError
		if !errors.As(err, &oe) || oe.Option == "" {
			t.Fatalf("New(%v) = %v: want an *OptionError naming the option", names, err)
		}
		ok := slices.Contains(names, oe.Option)
		if !ok || !strings.Contains(err.Error(), oe.Option) {
			t.Fatalf("New(%v) = %v: names %q, which was not given", names, err, oe.Option)
		}
		return
	}

	t.Cleanup(func() { // a failed run must still let the bubble's goroutines exit
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		_ = q.Shutdown(ctx)
	})
	require := func(cond bool, format string, args ...any) {
		t.Helper()
		if !cond {
			t.Fatalf("options %v: "+format, append([]any{names}, args...)...)
		}
	}
	bg := context.Background()
	require(q.Start(bg) == nil, "Start failed")
	mustRun := map[int]bool{} // ready jobs that must have run when Stop returns
	for i, j := range jobs {
		job := queue.Job[int]{Key: j.key, Target: j.target, Payload: i}
		err := q.EnqueueIn(bg, job, j.delay)
		require(err == nil || errors.Is(err, queue.ErrQueueFull) || errors.Is(err, queue.ErrDuplicate),
			"Enqueue: %v", err)
		// A job that may be the coalesced rerun of an earlier one of its key
		// is exempt: if the queue is full when its key is released, it
		// waits WithRequeueDelay in the schedule, which Stop keeps.
		rerun := j.key != "" && slices.ContainsFunc(jobs[:i], func(o foJob) bool { return o.key == j.key })
		if err == nil && j.delay == 0 && j.target == "" && !rerun {
			mustRun[i] = true
		}
	}
	for range 3 {
		if err := q.Admit(); err != nil {
			d, ok := queue.RetryDelay(err)
			require(errors.Is(err, queue.ErrRateLimited) && ok && d > 0 && !strings.Contains(err.Error(), "-"),
				"Admit refused with %v", err)
		}
	}
	cands := []string{"t", "u"}
	fanout := func(excluded ...string) {
		got := q.Fanout("a", cands)
		require(len(got) <= len(cands), "Fanout = %v", got)
		for i, g := range got {
			require(slices.Contains(cands, g) && !slices.Contains(got[:i], g) && !slices.Contains(excluded, g),
				"Fanout = %v, with %v excluded", got, excluded)
		}
	}
	fanout()
	require(q.Suspend("t", 0) == nil, "Suspend")
	require(q.Disable("u", errors.New("fuzz")) == nil, "Disable")
	fanout("t", "u")
	queuetest.Advance(2 * time.Second)
	require(q.Resume("t") == nil && q.Resume("u") == nil, "Resume")

	ctx, cancel := context.WithTimeout(bg, time.Minute)
	defer cancel()
	start := time.Now()
	err = q.Stop(ctx)
	require(err == nil, "Stop = %v after %v of fake time", err, time.Since(start))
	mu.Lock()
	for i := range mustRun {
		require(runs[i] > 0, "ready job %d (%+v) did not run before Stop returned", i, jobs[i])
	}
	mu.Unlock()
	st := queuetest.CheckCounts(t, q)
	require(st.Running == 0 && st.Store.Waiting == 0, "stopped with %d running, %d waiting", st.Running, st.Store.Waiting)
}
