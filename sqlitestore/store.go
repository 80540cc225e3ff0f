package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/queuekit/queue/queuetype"
	"github.com/queuekit/queue/storekit"
	"github.com/queuekit/queue/storekit/durable"
)

// ErrNotBound is returned by the methods that need the queue's
// configuration (EnqueueTx, EnqueueMany, the target and slot methods)
// when the store has not been passed to queue.NewWithStore.
var ErrNotBound = errors.New("sqlitestore: store not bound to a queue (pass it to queue.NewWithStore first)")

// The states, as stored.
const (
	stScheduled = "scheduled"
	stAvailable = "available"
	stRunning   = "running"
	stRetryable = "retryable"
	stPending   = "pending"
	stCompleted = "completed"
	stDead      = "dead"
	stCancelled = "cancelled"

	liveStates    = `('scheduled', 'available', 'running', 'retryable')`
	waitingStates = `('scheduled', 'available', 'retryable', 'pending')`
)

// Store keeps a queue's jobs in a SQLite file. It implements
// storekit.Store, storekit.Leaser, storekit.HoldStore,
// storekit.ClaimCanceller, storekit.RunCanceller, storekit.TargetStore,
// storekit.Admitter, storekit.FleetSizer and storekit.SlotStore; Admin
// returns its admin.Store. A Store serves one queue; make one per queue
// (several queues may share one DB). All methods are safe for concurrent
// use.
type Store[T any] struct {
	db    *DB
	o     options
	cfg   storekit.Config
	owner string

	mu      sync.Mutex
	bound   atomic.Bool
	started bool
	closed  bool
	stop    context.CancelFunc
	wg      sync.WaitGroup
	startCh chan struct{}

	drained  atomic.Bool
	drainCh  chan struct{}
	drainOne sync.Once

	// Claims: jobs claimed for this process and not yet handed out wait
	// in buf; Claim callers waiting count in waiting and wait on arrived,
	// closed (and replaced) when jobs arrive. cmu guards buf, waiting,
	// claiming and arrived.
	cmu       sync.Mutex
	buf       []claimed
	waiting   int
	claiming  int // jobs reserved by claims under way (reserve)
	arrived   chan struct{}
	wantFetch chan struct{} // a Claim caller waits
	wake      chan struct{} // something may have become claimable
	empty     atomic.Bool   // the last claim found nothing

	wakePromote chan struct{}
	passes      *passes

	cancelMu  sync.Mutex
	cancelReq map[int64]bool

	ready   atomic.Int64
	procs   atomic.Int64
	lead    durable.Leader
	healthy atomic.Bool
	lastErr atomic.Pointer[string]
	watch   *watcher
	notes   notes
	tx      txWatch
}

// claimed is a job claimed for this process, not yet handed out.
type claimed struct {
	id          int64
	priority    int
	runAt       int64
	sched       sql.NullInt64
	attempt     int
	maxAttempts int
	key, group  []byte
	target      string
	payload     []byte
	meta        sql.NullString
}

const claimedCols = "id, priority, run_at, scheduled_at, attempt, max_attempts, key, group_key, target, payload, meta"

func scanClaimed(rows *sql.Rows) ([]claimed, error) {
	defer rows.Close()
	var out []claimed
	for rows.Next() {
		var c claimed
		if err := rows.Scan(&c.id, &c.priority, &c.runAt, &c.sched, &c.attempt, &c.maxAttempts, &c.key, &c.group,
			&c.target, &c.payload, &c.meta); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

var (
	_ storekit.Store[int]          = (*Store[int])(nil)
	_ storekit.Leaser              = (*Store[int])(nil)
	_ storekit.HoldStore[int]      = (*Store[int])(nil)
	_ storekit.ClaimCanceller[int] = (*Store[int])(nil)
	_ storekit.RunCanceller        = (*Store[int])(nil)
)

// New returns a Store that keeps jobs of type T in db. It validates the
// options and does no I/O: the file must be migrated (see Migrate; Start
// checks). The store never closes db. A payload type the codec cannot
// encode is refused here.
func New[T any](db *DB, opts ...Option) (*Store[T], error) {
	o, err := buildOptions(opts)
	switch {
	case err != nil:
		return nil, err
	case db == nil:
		return nil, o.Err("New", nil, "db must not be nil")
	}
	if err := durable.CheckPayloadType[T](&o.Options); err != nil {
		return nil, err
	}
	s := &Store[T]{
		db:          db,
		o:           o,
		owner:       o.WorkerID,
		startCh:     make(chan struct{}),
		drainCh:     make(chan struct{}),
		arrived:     make(chan struct{}),
		wantFetch:   make(chan struct{}, 1),
		wake:        make(chan struct{}, 1),
		wakePromote: make(chan struct{}, 1),
		cancelReq:   map[int64]bool{},
	}
	s.healthy.Store(true)
	s.procs.Store(1)
	return s, nil
}

// WorkerID returns the name this process uses in lease and leader rows.
func (s *Store[T]) WorkerID() string { return s.owner }

// Init implements storekit.Store. It checks that the queue's name is
// acceptable: letters, digits and _ . : -, at most 63 bytes.
func (s *Store[T]) Init(cfg storekit.Config) error {
	cfg, err := durable.Bind("sqlitestore", cfg)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.bound.Load() {
		return fmt.Errorf("sqlitestore: the store already belongs to queue %q; a store serves one queue: make one per queue", s.cfg.Name)
	}
	s.cfg = cfg
	s.passes = newPasses(&cfg)
	s.bound.Store(true)
	return nil
}

// Start implements storekit.Store: it checks that the file is migrated
// (a *NotMigratedError matching ErrNotMigrated when not; nothing starts
// and Start may be called again), then starts the claim fetcher, the
// promoter, the lease rescue, leader election with its janitor, and the
// watch for other processes' writes.
func (s *Store[T]) Start(ctx context.Context) error {
	if !s.bound.Load() {
		return ErrNotBound
	}
	if err := s.startable(); err != nil {
		return err
	}
	if err := s.db.checkSchema(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.startableLocked(); err != nil {
		return err
	}
	s.started = true
	if err := s.notes.init(ctx, s.db, s.cfg.Name); err != nil {
		s.started = false
		return err
	}
	var bg context.Context
	bg, s.stop = context.WithCancel(context.WithoutCancel(ctx))
	run := func(f func(context.Context)) {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			f(bg)
		}()
	}
	s.watch = s.db.addWatcher(s.changed)
	run(s.fetchLoop)
	run(s.promoteLoop)
	run(s.rescueLoop)
	run(s.leaderLoop)
	run(s.fleetLoop)
	run(s.notes.loop)
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

// changed is called when the file changed (another connection
// committed): jobs may have become claimable, the schedule may have
// changed, and other processes may have announced target or slot state.
func (s *Store[T]) changed() {
	s.empty.Store(false)
	kick(s.wake)
	kick(s.wakePromote)
	s.notes.kick()
	s.tx.kick()
}

func (s *Store[T]) startable() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.startableLocked()
}

func (s *Store[T]) startableLocked() error {
	switch {
	case s.closed:
		return queuetype.ErrClosed
	case s.started:
		return queuetype.ErrStarted
	}
	return nil
}

// Drain implements storekit.Store. Claim returns storekit.ErrDrained once
// the jobs already claimed for this process are handed out: the backlog
// stays in the file for other processes.
func (s *Store[T]) Drain() {
	s.drainOne.Do(func() {
		s.drained.Store(true)
		close(s.drainCh)
	})
}

// Close implements storekit.Store: it stops the background work, gives
// back the jobs claimed but not handed out and resigns leadership. It
// does not close the DB.
func (s *Store[T]) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	stop := s.stop
	s.mu.Unlock()
	s.Drain()
	if stop != nil {
		stop()
	}
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		if s.watch != nil {
			s.db.removeWatcher(s.watch)
		}
		bg := context.WithoutCancel(ctx)
		s.releaseBuffered(bg)
		if s.lead.Resign() {
			_ = s.db.write(bg, func(tx *wtx) error {
				_, err := tx.ExecContext(bg, "DELETE FROM queuekit_leaders WHERE queue = ? AND leader_id = ?", s.cfg.Name, s.owner)
				return err
			})
		}
		if s.bound.Load() {
			_ = s.db.write(bg, func(tx *wtx) error {
				_, err := tx.ExecContext(bg, "DELETE FROM queuekit_processes WHERE queue = ? AND owner = ?", s.cfg.Name, s.owner)
				return err
			})
		}
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Len implements storekit.Store: a recent count of the queue's available
// jobs in the file, refreshed every poll interval and adjusted by this
// process's own adds and claims in between.
func (s *Store[T]) Len() int { return int(max(s.ready.Load(), 0)) }

// HeartbeatInterval implements storekit.Leaser: a third of the lease TTL.
func (s *Store[T]) HeartbeatInterval() time.Duration { return s.o.HeartbeatInterval() }

// Leader reports whether this process currently leads its queue: it runs
// retention pruning. (Every process rescues expired leases.)
func (s *Store[T]) Leader() bool { return s.lead.Leading() }

// Stats implements storekit.Store. It counts the queue's jobs in the file.
func (s *Store[T]) Stats(ctx context.Context) (storekit.Stats, error) {
	st := storekit.Stats{
		Backend:         "sqlite",
		Leader:          s.Leader(),
		ReadyByPriority: make(map[string]int, len(s.cfg.Priorities)),
		Detail:          "worker " + s.owner + "; file " + s.db.path,
	}
	for _, p := range s.cfg.Priorities {
		st.ReadyByPriority[p.Name] = 0
	}
	rows, err := s.db.r.QueryContext(ctx, `SELECT state, priority, count(*), sum(key <> x'') FROM queuekit_jobs
		WHERE queue = ? AND state IN ('scheduled', 'available', 'running', 'retryable', 'pending', 'dead')
		GROUP BY state, priority`, s.cfg.Name)
	if err == nil {
		err = func() error {
			defer rows.Close()
			for rows.Next() {
				var state string
				var weight, n, keyed int
				if err := rows.Scan(&state, &weight, &n, &keyed); err != nil {
					return err
				}
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
			}
			return rows.Err()
		}()
	}
	s.noteErr(err)
	st.Healthy = s.healthy.Load()
	if err != nil {
		return st, fmt.Errorf("sqlitestore: stats: %w", err)
	}
	s.ready.Store(int64(st.Ready))
	return st, nil
}

func (s *Store[T]) noteErr(err error) {
	switch {
	case err == nil:
		s.healthy.Store(true)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
	default:
		msg := err.Error()
		s.lastErr.Store(&msg)
		s.healthy.Store(false)
	}
}

// Scheduled implements storekit.Store: scheduled and retryable jobs,
// earliest first.
func (s *Store[T]) Scheduled(ctx context.Context, n int) ([]queuetype.ScheduledJob, error) {
	if n <= 0 {
		return nil, nil
	}
	rows, err := s.db.r.QueryContext(ctx, `SELECT id, key, group_key, target, priority, run_at, attempt FROM queuekit_jobs
		WHERE queue = ? AND state IN ('scheduled', 'retryable') ORDER BY run_at, id LIMIT ?`, s.cfg.Name, n)
	if err != nil {
		s.noteErr(err)
		return nil, fmt.Errorf("sqlitestore: scheduled: %w", err)
	}
	defer rows.Close()
	var out []queuetype.ScheduledJob
	for rows.Next() {
		var j queuetype.ScheduledJob
		var key, group []byte
		var weight int
		var at int64
		if err := rows.Scan(&j.ID, &key, &group, &j.Target, &weight, &at, &j.Attempt); err != nil {
			return nil, fmt.Errorf("sqlitestore: scheduled: %w", err)
		}
		j.Key, j.Group, j.Priority, j.RunAt = string(key), string(group), s.label(weight), fromNS(at)
		out = append(out, j)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlitestore: scheduled: %w", err)
	}
	return out, nil
}

// label returns the priority label of weight w.
func (s *Store[T]) label(w int) string {
	for _, p := range s.cfg.Priorities {
		if p.Weight == w {
			return p.Name
		}
	}
	return ""
}

func (s *Store[T]) report(kind queuetype.EventKind, id int64, key []byte, target string, weight, attempt int, err error) {
	s.cfg.Report(queuetype.Event{Kind: kind, Time: s.cfg.Clock.Now(), JobID: id, Key: string(key), Target: target,
		Priority: s.label(weight), Attempt: attempt, Err: err})
}

func (s *Store[T]) now() int64 { return toNS(s.cfg.Clock.Now()) }

func toNS(t time.Time) int64 { return t.UnixNano() }

func fromNS(n int64) time.Time { return time.Unix(0, n).UTC() }

// kb returns key as a BLOB argument (never NULL).
func kb(key string) []byte {
	if key == "" {
		return []byte{}
	}
	return []byte(key)
}

func kick(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
