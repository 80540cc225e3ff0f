package pgstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/queuekit/queue"
)

// ErrLeaseLost is returned by Complete, Retry, Defer and Dead when this
// process no longer holds the job's lease: the leader rescued it after the
// lease expired (and it may already run elsewhere), or it was released.
// Nothing was written. It matches queue.ErrLeaseLost, so the queue counts
// no outcome for the run.
var ErrLeaseLost = fmt.Errorf("pgstore: job lease lost: %w", queue.ErrLeaseLost)

// ErrNotBound is returned by EnqueueTx and EnqueueMany before the store was
// passed to queue.New (which tells it its queue's name and priorities).
var ErrNotBound = errors.New("pgstore: store is not bound to a queue (pass it to queue.New first)")

// PayloadTooLargeError is returned when a job's encoded payload is larger
// than WithMaxPayloadBytes allows. Nothing is inserted.
type PayloadTooLargeError struct {
	Size, Limit int // bytes
}

func (e *PayloadTooLargeError) Error() string {
	return fmt.Sprintf("pgstore: payload of %d bytes exceeds the limit of %d", e.Size, e.Limit)
}

// Store is a queue.Store and queue.Leaser that keeps jobs in PostgreSQL, so
// that several processes share one queue and jobs survive restarts. Create
// it with New, create its tables with Migrate, and pass it to queue.New with
// queue.WithStore; a Store belongs to one queue.Queue.
//
// All methods are safe for concurrent use.
type Store[T any] struct {
	pool    *pgxpool.Pool
	o       options
	q       *queries
	owner   string // this process's name in lease and leader rows
	channel string // NOTIFY channel, shared by the queues of one schema

	cfg   queue.StoreConfig
	bound atomic.Bool

	mu       sync.Mutex // guards started, closed, stop, and Init
	started  bool
	closed   bool
	stop     context.CancelFunc
	wg       sync.WaitGroup
	startCh  chan struct{} // closed by Start
	closeCh  chan struct{} // closed by Close
	drainCh  chan struct{} // closed by Drain
	drainOne sync.Once
	drained  atomic.Bool

	// Claim hand-off: the fetcher claims as many jobs as Claim callers
	// wait for and hands each to a waiter, or to spare when the waiter
	// left. held are the claimed jobs not yet handed out (ID to attempt),
	// extended by Heartbeat and released by Close.
	handMu      sync.Mutex
	waiters     []chan queue.Job[T]
	spare       []queue.Job[T]
	claiming    int          // jobs being claimed by statements in flight (handMu)
	promised    int          // spare jobs claimed for workers returning from an outcome (handMu)
	expect      atomic.Int64 // workers about to call Claim again
	heldMu      sync.Mutex
	held        map[int64]int
	wakeFetch   chan struct{}
	wakePromote chan struct{}

	w  writer
	nt notifier // wake-ups for Add, sent after its commit

	promoteMu sync.Mutex // one PromoteDue at a time
	rescueMu  sync.Mutex // one RescueExpired at a time

	ready       atomic.Int64 // recent count of available jobs, for Len
	leaderMu    sync.Mutex
	leaderUntil time.Time // monotonic deadline of this process's leadership
	healthy     atomic.Bool
	lastErr     atomic.Pointer[string]
	listening   atomic.Bool
}

var (
	_ queue.Store[int] = (*Store[int])(nil)
	_ queue.Leaser     = (*Store[int])(nil)
)

// New returns a Store that keeps jobs of type T in the database behind
// pool. It validates the options and does no I/O: the tables must exist
// (see Migrate), and the connection is first used by Start or Add. The
// store never closes pool.
func New[T any](pool *pgxpool.Pool, opts ...Option) (*Store[T], error) {
	if pool == nil {
		return nil, optErr("New", nil, "pool must not be nil")
	}
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	if o.workerID == "" {
		o.workerID = defaultWorkerID()
	}
	s := &Store[T]{
		pool:        pool,
		o:           o,
		q:           newQueries(o.schema),
		owner:       o.workerID,
		channel:     channelName(o.schema),
		startCh:     make(chan struct{}),
		closeCh:     make(chan struct{}),
		drainCh:     make(chan struct{}),
		held:        make(map[int64]int),
		wakeFetch:   make(chan struct{}, 1),
		wakePromote: make(chan struct{}, 1),
	}
	s.w.init(s.o.writeBatch)
	s.w.execute = s.execBatch
	s.nt.init()
	s.healthy.Store(true)
	return s, nil
}

func defaultWorkerID() string {
	host, _ := os.Hostname()
	if host == "" {
		host = "host"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// channelName is the NOTIFY channel of a schema's queues; the payload
// names the queue. It is a hash, so any schema name fits in 63 bytes.
func channelName(schema string) string {
	h := fnv.New32a()
	h.Write([]byte(schema))
	return fmt.Sprintf("queuekit_%08x", h.Sum32())
}

// WorkerID returns the name this process uses in lease and leader rows.
func (s *Store[T]) WorkerID() string { return s.owner }

// Init implements queue.Store. It checks that the queue's name is
// acceptable (see WithName in package queue): letters, digits and _ . : -,
// at most 63 bytes.
func (s *Store[T]) Init(cfg queue.StoreConfig) error {
	if !queueNameRE.MatchString(cfg.Name) {
		return fmt.Errorf("pgstore: queue name %q is not valid ([A-Za-z0-9_][A-Za-z0-9_.:-]{0,62})", cfg.Name)
	}
	if len(cfg.Priorities) == 0 {
		return errors.New("pgstore: no priorities")
	}
	s.mu.Lock() // two queues' New may race for the store
	defer s.mu.Unlock()
	if s.bound.Load() {
		return fmt.Errorf("pgstore: the store already belongs to queue %q; a store serves one queue: make one per queue", s.cfg.Name)
	}
	if cfg.Clock == nil {
		cfg.Clock = queue.SystemClock{}
	}
	if cfg.Report == nil {
		cfg.Report = func(queue.Event) {}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s.cfg = cfg
	s.bound.Store(true)
	return nil
}

// Start implements queue.Store: it starts the claim fetcher, the promoter
// (which moves due scheduled jobs to available), the LISTEN connection and
// leader election with its janitor. It returns at once and does not fail
// when the database is unreachable: the background work retries with
// backoff, and Stats reports Healthy false meanwhile.
func (s *Store[T]) Start(ctx context.Context) error {
	if !s.bound.Load() {
		return ErrNotBound
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return queue.ErrClosed
	}
	if s.started {
		return queue.ErrStarted
	}
	s.started = true
	var bg context.Context
	bg, s.stop = context.WithCancel(context.WithoutCancel(ctx))
	run := func(f func(context.Context)) {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			f(bg)
		}()
	}
	run(s.fetchLoop)
	run(s.promoteLoop)
	run(s.leaderLoop)
	if s.o.listen {
		run(s.listenLoop)
	}
	// ctx bounds the background work, as for the queue.
	go func() {
		select {
		case <-ctx.Done():
			s.stop()
		case <-bg.Done():
		}
	}()
	close(s.startCh)
	return nil
}

// Drain implements queue.Store. Claim returns queue.ErrDrained once the
// jobs already claimed for this process are handed out: the backlog stays
// in the database for other processes.
func (s *Store[T]) Drain() {
	s.drainOne.Do(func() {
		s.drained.Store(true)
		close(s.drainCh)
	})
}

// Close implements queue.Store: it stops the background work, gives back
// jobs claimed but not handed out, writes the outcomes still queued, and
// resigns leadership. It does not close the pool.
func (s *Store[T]) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	stop := s.stop
	close(s.closeCh)
	s.mu.Unlock()
	s.Drain()
	if stop != nil {
		stop()
	}
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		// The writer first: a batch in flight may claim jobs (see
		// refill), which must be given back too.
		s.w.close()
		s.releaseHeld(context.WithoutCancel(ctx))
		s.closeNotifier()
		s.resign(context.WithoutCancel(ctx))
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Len implements queue.Store. It returns a recent count of the queue's
// available jobs in the whole database: refreshed every poll interval and
// adjusted by this process's own adds and claims in between. The count
// saturates at max(2·capacity, 10000).
func (s *Store[T]) Len() int { return int(max(s.ready.Load(), 0)) }

func (s *Store[T]) lenLimit() int64 { return int64(max(2*s.cfg.Capacity, 10000)) }

// HeartbeatInterval implements queue.Leaser: a third of the lease TTL.
func (s *Store[T]) HeartbeatInterval() time.Duration { return s.o.leaseTTL / 3 }

// Leader reports whether this process currently leads its queue: it runs
// the janitor (lease rescue and retention pruning).
func (s *Store[T]) Leader() bool {
	s.leaderMu.Lock()
	defer s.leaderMu.Unlock()
	return time.Now().Before(s.leaderUntil)
}

// Stats implements queue.Store. It counts the queue's jobs in the whole
// database. When the database cannot be reached it returns the error with
// Backend, Leader and Healthy (false) filled in.
func (s *Store[T]) Stats(ctx context.Context) (queue.StoreStats, error) {
	st := queue.StoreStats{
		Backend:         "postgres",
		Leader:          s.Leader(),
		ReadyByPriority: make(map[string]int, len(s.cfg.Priorities)),
	}
	for _, p := range s.cfg.Priorities {
		st.ReadyByPriority[p.Name] = 0
	}
	rows, err := s.pool.Query(ctx, s.q.stats, s.cfg.Name)
	if err == nil {
		var state string
		var weight, n, keyed int
		_, err = pgx.ForEachRow(rows, []any{&state, &weight, &n, &keyed}, func() error {
			switch state {
			case stAvailable:
				st.Ready += n
				st.ReadyByPriority[s.label(weight)] += n
				st.PendingKeys += keyed
			case stScheduled, stRetryable:
				st.Scheduled += n
				st.PendingKeys += keyed
			case stRunning:
				st.Running += n
				st.PendingKeys += keyed
			case stPending:
				st.Waiting += n
			case stDead:
				st.Dead += n
			}
			return nil
		})
	}
	s.noteErr(err)
	st.Healthy = s.healthy.Load()
	st.Detail = s.detail()
	if err != nil {
		return st, fmt.Errorf("pgstore: stats: %w", err)
	}
	s.ready.Store(int64(st.Ready))
	return st, nil
}

func (s *Store[T]) detail() string {
	d := "worker " + s.owner
	if s.o.listen {
		if s.listening.Load() {
			d += "; listen: ok"
		} else {
			d += "; listen: down (polling)"
		}
	} else {
		d += "; listen: off (polling)"
	}
	if p := s.lastErr.Load(); p != nil && !s.healthy.Load() {
		d += "; last error: " + *p
	}
	return d
}

// noteErr records the outcome of a database call for Stats.Healthy. Errors
// the server reported (a bad statement, a constraint) say the server is
// reachable; context cancellations say nothing.
func (s *Store[T]) noteErr(err error) {
	switch {
	case err == nil:
		s.healthy.Store(true)
	case errors.Is(err, context.Canceled):
	default:
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			s.healthy.Store(true)
			return
		}
		msg := err.Error()
		s.lastErr.Store(&msg)
		s.healthy.Store(false)
	}
}

// Scheduled implements queue.Store: scheduled and retryable jobs, earliest
// first.
func (s *Store[T]) Scheduled(ctx context.Context, n int) ([]queue.ScheduledJob, error) {
	if n <= 0 {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, s.q.sched, s.cfg.Name, n)
	if err != nil {
		s.noteErr(err)
		return nil, fmt.Errorf("pgstore: scheduled: %w", err)
	}
	var out []queue.ScheduledJob
	var j queue.ScheduledJob
	var weight int
	_, err = pgx.ForEachRow(rows, []any{&j.ID, &j.Key, &j.Group, &j.Target, &weight, &j.RunAt, &j.Attempt}, func() error {
		j.Priority = s.label(weight)
		out = append(out, j)
		return nil
	})
	s.noteErr(err)
	if err != nil {
		return nil, fmt.Errorf("pgstore: scheduled: %w", err)
	}
	return out, nil
}

// label returns the priority label of weight w ("" if the queue has none).
func (s *Store[T]) label(w int) string {
	for _, p := range s.cfg.Priorities {
		if p.Weight == w {
			return p.Name
		}
	}
	return ""
}

func (s *Store[T]) report(kind queue.EventKind, id int64, key, target string, weight, attempt int, d time.Duration, err error) {
	s.cfg.Report(queue.Event{Kind: kind, Time: s.cfg.Clock.Now(), JobID: id, Key: key, Target: target,
		Priority: s.label(weight), Attempt: attempt, Delay: d, Err: err})
}

func kick(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// sleep waits d of real time; false if ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// isServerError reports whether err came from the server (the statement
// failed, the connection is fine).
func isServerError(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr)
}
