package pgstore

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/storekit"
	"github.com/queuekit/queue/storekit/durable"
)

// ErrLeaseLost is returned by Complete, Retry, Defer and Dead when this
// process no longer holds the job's lease: a process rescued it after the
// lease expired (and it may already run elsewhere), or it was released.
// Nothing was written. It matches storekit.ErrLeaseLost, so the queue counts
// no outcome for the run.
var ErrLeaseLost = fmt.Errorf("pgstore: job lease lost: %w", storekit.ErrLeaseLost)

// ErrNotBound is returned by EnqueueTx and EnqueueMany before the store was
// passed to queue.New (which tells it its queue's name and priorities).
var ErrNotBound = errors.New("pgstore: store is not bound to a queue (pass it to queue.New first)")

// ErrNotMigrated matches the *NotMigratedError that Start returns when
// the store's schema lacks its tables or is at an older migration version
// than this pgstore needs, and that Stats, Add and EnqueueMany return
// when the server says the tables do not exist: run Migrate.
var ErrNotMigrated = errors.New("pgstore: schema not migrated")

// NotMigratedError says that the store's schema is not ready for it:
// a table is missing (Missing names it), or the schema's
// queuekit_migrations table records an older version than this pgstore
// needs (Version < Want). Run Migrate with the same WithSchema. It
// matches ErrNotMigrated.
type NotMigratedError struct {
	Schema  string // the schema looked in: WithSchema's, or the search_path's first ("" if not known)
	Missing string // the table not found, qualified and quoted; "" when the version is old
	Version int    // the latest migration recorded in the schema (when Missing is "")
	Want    int    // the latest migration this pgstore has (see Migrations)
	Err     error  // the server's error, when a statement found the table missing; or nil
}

func (e *NotMigratedError) Error() string {
	schema := fmt.Sprintf("schema %q", e.Schema)
	if e.Schema == "" {
		schema = "the search_path's schema"
	}
	if e.Missing != "" {
		return fmt.Sprintf("pgstore: %s is not migrated (table %s missing): run pgstore.Migrate", schema, e.Missing)
	}
	return fmt.Sprintf("pgstore: %s is at migration version %d, this pgstore needs %d: run pgstore.Migrate", schema, e.Version, e.Want)
}

// Is makes a *NotMigratedError match ErrNotMigrated.
func (e *NotMigratedError) Is(target error) bool { return target == ErrNotMigrated }

// Unwrap returns the server's error, if any.
func (e *NotMigratedError) Unwrap() error { return e.Err }

// Store is a storekit.Store and storekit.Leaser that keeps jobs in PostgreSQL, so
// that several processes share one queue and jobs survive restarts. Create
// it with New, create its tables with Migrate, and pass it to
// queue.NewWithStore; a Store belongs to one queue.Queue.
//
// All methods are safe for concurrent use.
type Store[T any] struct {
	pool    *pgxpool.Pool
	o       options
	q       *queries
	fq      fleetQueries
	sq      slotQueries
	slots   slotState // storekit.SlotStore's (slots.go)
	owner   string    // this process's name in lease and leader rows
	channel string    // NOTIFY channel, shared by the queues of one schema

	cfg storekit.Config
	// passes is the weighted dispatch state; nil for strict priorities.
	passes *passes
	lc     leaseClock // set with cfg, by Init
	bound  atomic.Bool

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
	owed        int          // of the fetch under way, the jobs claimed for workers returning from an outcome (handMu; see want)
	expect      atomic.Int64 // workers about to call Claim again
	heldMu      sync.Mutex
	held        map[int64]int
	cancelMu    sync.Mutex
	cancelReq   map[int64]bool // running jobs an operator asked to cancel (see CancelRequested)
	wakeFetch   chan struct{}  // jobs may have become claimable (see dryClaims)
	wantFetch   chan struct{}  // a Claim caller may need a claim (see dryClaims)
	wakePromote chan struct{}
	dry         dryClaims
	hint        claimHint

	w   writer
	nt  notifier    // wake-ups for Add, sent after its commit
	tw  targetWatch // storekit.TargetStore's announcements (targets.go)
	due dueTimer    // the promoter's timer, moved by Add
	fd  fetchDue    // due times of jobs promoted ahead, for the fetcher

	promoteMu sync.Mutex // one PromoteDue at a time
	rescueMu  sync.Mutex // one RescueExpired at a time

	ready      atomic.Int64 // recent count of available jobs, for Len
	copyMin    int          // EnqueueMany's least batch for COPY (defaultCopyMin; tests change it)
	procs      atomic.Int64 // live processes of the queue, for Processes
	tx         txWatcher    // EnqueueTx's jobs, until their commit is seen
	lead       durable.Leader
	schemaName atomic.Pointer[string] // as Start found it (WithSchema's, or the search_path's)
	healthy    atomic.Bool
	lastErr    atomic.Pointer[string]
	listening  atomic.Bool
}

var (
	_ storekit.Store[int] = (*Store[int])(nil)
	_ storekit.Leaser     = (*Store[int])(nil)
)

// New returns a Store that keeps jobs of type T in the database behind
// pool. It validates the options and does no I/O: the tables must exist
// (see Migrate; Start checks that they do), and the connection is first
// used by Start or Add. The store never closes pool. A payload type the
// codec cannot encode (with encoding/json: a func, a chan, a complex
// number, or a struct holding one) is refused here, not at every Add.
func New[T any](pool *pgxpool.Pool, opts ...Option) (*Store[T], error) {
	o, err := buildOptions(opts)
	switch {
	case err != nil:
		return nil, err
	case pool == nil:
		return nil, o.Err("New", nil, "pool must not be nil")
	}
	if err := durable.CheckPayloadType[T](&o.Options); err != nil {
		return nil, err
	}
	s := &Store[T]{
		pool:        pool,
		o:           o,
		q:           newQueries(o.schema),
		copyMin:     defaultCopyMin,
		owner:       o.WorkerID,
		channel:     channelName(o.schema),
		startCh:     make(chan struct{}),
		closeCh:     make(chan struct{}),
		drainCh:     make(chan struct{}),
		held:        make(map[int64]int),
		cancelReq:   make(map[int64]bool),
		wakeFetch:   make(chan struct{}, 1),
		wantFetch:   make(chan struct{}, 1),
		wakePromote: make(chan struct{}, 1),
	}
	s.fq = newFleetQueries(o.schema, s.q.jobs)
	s.sq = newSlotQueries(o.schema)
	s.w.init(s.o.writeBatch)
	s.w.execute = s.execBatch
	s.nt.init()
	s.tw.listenUp = make(chan struct{})
	s.due.wake = make(chan struct{}, 1)
	s.fd.wake = make(chan struct{}, 1)
	s.healthy.Store(true)
	return s, nil
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

// Init implements storekit.Store. It checks that the queue's name is
// acceptable (see WithName in package queue): letters, digits and _ . : -,
// at most 63 bytes.
func (s *Store[T]) Init(cfg storekit.Config) error {
	cfg, err := durable.Bind("pgstore", cfg)
	if err != nil {
		return err
	}
	s.mu.Lock() // two queues' New may race for the store
	defer s.mu.Unlock()
	if s.bound.Load() {
		return fmt.Errorf("pgstore: the store already belongs to queue %q; a store serves one queue: make one per queue", s.cfg.Name)
	}
	s.cfg = cfg
	s.passes = newPasses(&cfg)
	s.lc = leaseClock{clock: cfg.Clock.Now(), real: time.Now()}
	s.bound.Store(true)
	return nil
}

// schemaCheckTimeout bounds Start's look at the schema.
const schemaCheckTimeout = 5 * time.Second

// Start implements storekit.Store: it checks that the schema is migrated,
// then starts the claim fetcher, the promoter (which moves due scheduled
// jobs to available), the LISTEN connection, the lease rescuer, and
// leader election with its janitor.
//
// Start returns a *NotMigratedError (matching ErrNotMigrated) when the
// store's tables are missing or the schema's queuekit_migrations table
// records an older version than Migrations has; nothing is started, and
// Start may be called again once Migrate has run. A schema migrated with
// another tool (no queuekit_migrations table) is checked for its tables
// only. Start does not fail when the database is unreachable (the check
// waits at most 5 s): the background work retries with backoff, Stats
// reports Healthy false meanwhile, and a schema found not migrated later
// is reported by Stats as ErrNotMigrated. A configuration that cannot
// work is not an outage: when the server refuses the user or the password,
// the database does not exist, or the host does not resolve, Start
// returns that error at once (wrapping pgx's, a *pgconn.PgError for the
// server's refusals), starts nothing, and may be called again. When the
// queue watches target state (WatchTargets), LISTEN is on and the database
// answered, Start also waits, at most 5 s, for the LISTEN connection.
func (s *Store[T]) Start(ctx context.Context) error {
	if !s.bound.Load() {
		return ErrNotBound
	}
	if err := s.startable(); err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, schemaCheckTimeout)
	err := s.checkSchema(cctx)
	cancel()
	var nm *NotMigratedError
	switch {
	case errors.As(err, &nm):
		return err
	case misconfigured(err):
		return fmt.Errorf("pgstore: Start: the database refuses this configuration, which is not an outage and will not pass by retrying (check the connection string): %w", err)
	case err != nil:
		s.noteErr(err)
		s.cfg.Logger.Warn("pgstore: could not check the schema at start; starting anyway", "err", err)
	}
	reached := err == nil
	listen := false
	defer func() {
		if listen && reached { // after the unlock; unreached, it cannot come soon
			s.awaitListen()
		}
	}()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.startableLocked(); err != nil {
		return err
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
	run(s.rescueLoop)
	run(s.leaderLoop)
	if s.o.listen {
		run(s.listenLoop)
		listen = true
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

// misconfigured reports whether err, from Start's first statement, says
// that the connection cannot work until its configuration changes: the
// server refused the user or the password (28P01, 28000), the database
// does not exist (3D000), or the address cannot work (durable.BadAddress).
func misconfigured(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "28P01", "28000", "3D000":
			return true
		}
	}
	return err != nil && durable.BadAddress(err)
}

func (s *Store[T]) startable() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.startableLocked()
}

func (s *Store[T]) startableLocked() error {
	switch {
	case s.closed:
		return queue.ErrClosed
	case s.started:
		return queue.ErrStarted
	}
	return nil
}

// checkSchema returns a *NotMigratedError when the store's tables are
// missing, or the schema records an older migration than this package
// has; another error when it could not tell.
func (s *Store[T]) checkSchema(ctx context.Context) error {
	var (
		schema                        *string
		jobs, leaders, marks, applied bool
	)
	migrations := migrationsTable(s.o.schema)
	err := s.pool.QueryRow(ctx, `SELECT current_schema(), to_regclass($1) IS NOT NULL, to_regclass($2) IS NOT NULL,
		to_regclass($3) IS NOT NULL, to_regclass($4) IS NOT NULL`, s.q.jobs, s.q.leaders, migrations, s.q.marks).Scan(&schema, &jobs, &leaders, &applied, &marks)
	if err != nil {
		return fmt.Errorf("pgstore: checking the schema: %w", err)
	}
	name := s.o.schema
	if name == "" && schema != nil {
		name = *schema
	}
	s.schemaName.Store(&name)
	switch {
	case !jobs:
		return &NotMigratedError{Schema: name, Missing: s.q.jobs}
	case !leaders:
		return &NotMigratedError{Schema: name, Missing: s.q.leaders}
	case !marks && !applied:
		// Migrated with another tool, without 002_unique.sql.
		return &NotMigratedError{Schema: name, Missing: s.q.marks}
	case !applied:
		return nil // migrated with another tool: no versions to compare
	}
	var version int
	if err := s.pool.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM "+migrations).Scan(&version); err != nil {
		return fmt.Errorf("pgstore: checking the schema's migrations: %w", err)
	}
	if want := latestMigration(); version < want {
		return &NotMigratedError{Schema: name, Version: version, Want: want}
	}
	return nil
}

// notMigrated returns a *NotMigratedError for a statement's error that
// says the store's tables (or its schema) do not exist, else nil.
func (s *Store[T]) notMigrated(err error) *NotMigratedError {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || (pgErr.Code != "42P01" && pgErr.Code != "3F000") { // undefined_table, invalid_schema_name
		return nil
	}
	name := s.o.schema
	if p := s.schemaName.Load(); p != nil {
		name = *p
	}
	missing := s.q.jobs
	switch {
	case strings.Contains(pgErr.Message, "queuekit_leaders"):
		missing = s.q.leaders
	case strings.Contains(pgErr.Message, "queuekit_unique"):
		missing = s.q.marks
	}
	return &NotMigratedError{Schema: name, Missing: missing, Err: err}
}

// Drain implements storekit.Store. Claim returns storekit.ErrDrained once the
// jobs already claimed for this process are handed out: the backlog stays
// in the database for other processes.
func (s *Store[T]) Drain() {
	s.drainOne.Do(func() {
		s.drained.Store(true)
		close(s.drainCh)
	})
}

// Close implements storekit.Store: it stops the background work, gives back
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
		// The writer first: a batch in flight asks the fetcher for its
		// workers' next jobs (see writeOnce), which must be given back
		// too.
		s.w.close()
		s.releaseHeld(context.WithoutCancel(ctx))
		s.closeNotifier()
		s.resign(context.WithoutCancel(ctx))
		s.leaveFleet(context.WithoutCancel(ctx))
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Len implements storekit.Store. It returns a recent count of the queue's
// available jobs in the whole database, the same for every process:
// refreshed every poll interval (idle or not, from Start on) and adjusted
// by this process's own adds and claims in between. The count saturates
// at max(2·capacity, 10000).
func (s *Store[T]) Len() int { return int(max(s.ready.Load(), 0)) }

func (s *Store[T]) lenLimit() int64 { return int64(max(2*s.cfg.Capacity, 10000)) }

// HeartbeatInterval implements storekit.Leaser: a third of the lease TTL.
func (s *Store[T]) HeartbeatInterval() time.Duration { return s.o.HeartbeatInterval() }

// Leader reports whether this process currently leads its queue: it runs
// retention pruning. (Every process rescues expired leases.)
func (s *Store[T]) Leader() bool { return s.lead.Leading() }

// Stats implements storekit.Store. It counts the queue's jobs in the whole
// database. When the database cannot be reached it returns the error with
// Backend, Leader and Healthy (false) filled in.
func (s *Store[T]) Stats(ctx context.Context) (storekit.Stats, error) {
	st := storekit.Stats{
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
	if nm := s.notMigrated(err); nm != nil {
		return st, nm
	}
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
// reachable, except that the store's tables are missing, which makes
// every call fail; context cancellations say nothing.
func (s *Store[T]) noteErr(err error) {
	switch {
	case err == nil:
		s.healthy.Store(true)
	case errors.Is(err, context.Canceled):
	default:
		if nm := s.notMigrated(err); nm != nil {
			msg := nm.Error()
			s.lastErr.Store(&msg)
			s.healthy.Store(false)
			return
		}
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

// Scheduled implements storekit.Store: scheduled and retryable jobs, earliest
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
	var keyRaw, groupRaw []byte
	_, err = pgx.ForEachRow(rows, []any{&j.ID, &j.Key, &j.Group, &j.Target, &weight, &j.RunAt, &j.Attempt, &keyRaw, &groupRaw}, func() error {
		j.Priority = s.label(weight)
		j.Key, j.Group = loadKey(j.Key, keyRaw), loadKey(j.Group, groupRaw)
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

// isServerError reports whether err came from the server (the statement
// failed, the connection is fine).
func isServerError(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr)
}
