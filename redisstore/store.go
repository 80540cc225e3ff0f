package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/storekit"
	"github.com/queuekit/queue/storekit/durable"
)

// Errors of the Redis store. Match them with errors.Is.
var (
	// ErrLeaseLost: the job's lease expired and the job was rescued (it
	// may run again, here or elsewhere) before this process finished it.
	// It matches storekit.ErrLeaseLost, so the queue counts no outcome for
	// the run.
	ErrLeaseLost = fmt.Errorf("redisstore: %w", storekit.ErrLeaseLost)

	// ErrNotClaimed: a job passed to Complete, Retry, Defer or Dead was
	// not claimed from this store, or was already finished.
	ErrNotClaimed = errors.New("redisstore: job not claimed by this store")
)

// Store keeps a queue's jobs in Redis. It implements storekit.Store and
// storekit.Leaser; pass it to queue.NewWithStore. A Store belongs
// to one Queue; several processes share a queue by giving their Stores the
// same Redis, prefix and queue name.
//
// All methods are safe for concurrent use.
type Store[T any] struct {
	client redis.UniversalClient
	o      options
	cfg    storekit.Config
	lc     leaseClock // set with cfg, by Init
	capArg any        // cfg.Capacity, boxed once for the add scripts
	owner  string     // this process's lease and leader identity
	token  string     // registers this process's ID blocks (shard.reserve)
	down   bool       // New found Redis unreachable and WithConnect allowed it

	shards []*shard // ordered by their highest priority
	byPrio []*shard // indexed like cfg.Priorities
	cycle  []uint8  // weighted dispatch order over the queue's priorities (storekit.ShareCycle); nil: strict
	tick   atomic.Uint64

	claimMu sync.Mutex
	claims  map[int64]*claimRec[T]
	pending []settleOp // finishes that failed during an outage

	fbMu    sync.Mutex
	fb      *fallback[T]
	fbReady atomic.Int64 // fb.nready, for Len

	notify   chan struct{} // wakes one waiting Claim
	dueMoved chan struct{} // a shard's learnt next due time moved earlier (due.go)
	waiting  atomic.Int32  // Claim calls in progress
	sleeping atomic.Int32  // Claim calls asleep in wait, for a wake-up

	lead  durable.Leader
	tw    targetWatch  // storekit.TargetStore's subscription (targets.go)
	sw    slotWatch    // storekit.SlotStore's subscription (slots.go)
	procs atomic.Int64 // live processes of the queue, for Processes

	// Outage accounting, for logs and tests.
	nFallback, nWrittenBack, nFlushed atomic.Int64

	started, drained, closing     chan struct{}
	startOnce, drainOnce, closeMu sync.Once
	wg                            sync.WaitGroup

	cancelMu  sync.Mutex
	cancelReq map[int64]bool // running jobs an operator asked to cancel (see CancelRequested)
	nCancel   atomic.Int32   // len(cancelReq)

	initMu sync.Mutex // serialises Init
	bound  bool       // Init succeeded: the store belongs to a queue; initMu
}

var (
	_ storekit.Store[int] = (*Store[int])(nil)
	_ storekit.Leaser     = (*Store[int])(nil)
)

// claimRec is what this process knows of a job it claimed. A job whose
// lease expired while this process still ran it can be rescued and
// claimed here again: the claims of one ID are then chained, newest
// first, and told apart by attempt (a new claim's attempt is always above
// that of a claim whose lease was lost), so that the outcome of the stale
// run is settled with its own lease, and refused, rather than with the
// current one.
type claimRec[T any] struct {
	sh      *shard
	lease   string
	fb      *fbJob[T] // set for a job claimed from the fallback
	attempt int
	older   *claimRec[T] // an earlier claim of the same ID, still running here
}

// New returns a Store on client. It checks that Redis answers within the
// connect timeout (WithConnect) and validates the options. A configuration
// that cannot work is not an outage: when Redis refuses the user, the
// password or the DB number, or the address does not resolve or is not
// one, New returns that error at once, even with WithConnect's degraded
// start (as pgstore's Start does). A plain *redis.Client is dialled once
// with its own dialer before the ping, so that an unreachable address
// fails at once and go-redis's pool does not print its dial failures;
// other clients are pinged only; a payload type
// the codec cannot encode (with encoding/json: a func, a chan, a complex
// number, or a struct holding one) is refused here, not at every Add. The store does
// nothing else until the queue calls Init and Start; Close never closes
// client.
func New[T any](client redis.UniversalClient, opts ...Option) (*Store[T], error) {
	if client == nil {
		return nil, &queue.OptionError{Option: "redisstore.New", Value: nil, Reason: "client must not be nil"}
	}
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	if err := durable.CheckPayloadType[T](&o.Options); err != nil {
		return nil, err
	}
	s := &Store[T]{
		client: client, o: o, owner: o.WorkerID, token: newToken(),
		claims:   map[int64]*claimRec[T]{},
		notify:   make(chan struct{}, 1),
		dueMoved: make(chan struct{}, 1),
		started:  make(chan struct{}),
		drained:  make(chan struct{}),
		closing:  make(chan struct{}),
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.connectTimeout)
	defer cancel()
	if err := connect(ctx, client); err != nil {
		if misconfigured(err) {
			return nil, fmt.Errorf("redisstore: New: Redis refuses this configuration, which is not an outage and will not pass by retrying (check the address, user, password and DB): %w", err)
		}
		if !o.startDegraded {
			return nil, fmt.Errorf("redisstore: redis unreachable: %w", err)
		}
		s.down = true
	}
	return s, nil
}

// connect checks that client's Redis answers. A plain client's address is
// dialled first with the client's own dialer, once: a dial that fails
// then returns at once, with its cause, where a Ping would have the pool
// dial again until ctx ends, each failure printed by go-redis's
// process-wide logger.
func connect(ctx context.Context, client redis.UniversalClient) error {
	if c, ok := client.(*redis.Client); ok {
		o := c.Options()
		if o.Dialer != nil {
			conn, err := o.Dialer(ctx, o.Network, o.Addr)
			if err != nil {
				return err
			}
			conn.Close()
		}
	}
	return client.Ping(ctx).Err()
}

// misconfigured reports whether err, from connecting to Redis, says that
// the client's configuration cannot work until it changes: Redis refused
// the user or the password, or the DB number, or the address cannot work
// (durable.BadAddress).
func misconfigured(err error) bool {
	if err == nil {
		return false
	}
	// HasErrorPrefix drops a leading "ERR ".
	for _, prefix := range []string{"WRONGPASS", "NOAUTH", "NOPERM", "invalid password", "AUTH ", "DB index is out of range"} {
		if redis.HasErrorPrefix(err, prefix) {
			return true
		}
	}
	return durable.BadAddress(err)
}

// newToken returns a random token naming this store's ID blocks.
func newToken() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// WorkerID returns the name this process uses in its leases and the
// leader key (WithWorkerID).
func (s *Store[T]) WorkerID() string { return s.owner }

// Init binds the store to its queue's configuration and lays out the
// shards. It is called by queue.New, and refuses a second call: a store
// belongs to one queue, so a store passed to two queues' New is refused
// by the second.
//
// A configuration built by hand may leave Logger, Clock and Report nil:
// they default, as in queue.New, to a logger that discards, the system
// clock and no reports.
func (s *Store[T]) Init(cfg storekit.Config) error {
	cfg, err := durable.Bind("redisstore", cfg)
	if err != nil {
		return err
	}
	s.initMu.Lock()
	defer s.initMu.Unlock()
	if s.bound {
		return fmt.Errorf("redisstore: the store already belongs to queue %q; a store serves one queue: make one per queue", s.cfg.Name)
	}
	for label := range s.o.shardClients {
		if cfg.PriorityIndex(label) < 0 || label == "" {
			return s.o.Err("WithShard", label, "not one of the queue's priorities")
		}
	}
	s.cfg = cfg
	s.lc = leaseClock{clock: cfg.Clock.Now(), real: time.Now()}
	s.capArg = cfg.Capacity
	// Group the priorities by client, in priority order.
	var clients []redis.UniversalClient
	var groups [][]int
	for i, p := range cfg.Priorities {
		c := s.client
		if sc, ok := s.o.shardClients[p.Name]; ok {
			c = sc
		}
		at := -1
		for j := range clients {
			if clients[j] == c {
				at = j
			}
		}
		if at < 0 {
			clients = append(clients, c)
			groups = append(groups, nil)
			at = len(clients) - 1
		}
		groups[at] = append(groups[at], i)
	}
	s.byPrio = make([]*shard, len(cfg.Priorities))
	if len(clients) > 1 {
		s.cycle = storekit.ShareCycle(cfg.Shares())
	}
	s.shards = nil
	for j, c := range clients {
		var labels []string
		def := ""
		for _, i := range groups[j] {
			labels = append(labels, cfg.Priorities[i].Name)
			if cfg.Priorities[i].Name == cfg.DefaultPriority {
				def = cfg.DefaultPriority
			}
		}
		if def == "" {
			def = labels[0]
		}
		ks := newKeyspace(s.o.prefix, cfg.Name, labels)
		sh := newShard(j, int64(groups[j][0]), c, ks, labels, def, len(clients) > 1, s.token)
		s.shards = append(s.shards, sh)
		for _, i := range groups[j] {
			s.byPrio[i] = sh
		}
		if cfg.Weighted() {
			shares := make([]int, len(groups[j]))
			for k, i := range groups[j] {
				shares[k] = cfg.Priorities[i].Share
			}
			for _, k := range storekit.ShareCycle(shares) {
				sh.cycle = append(sh.cycle, k+1)
			}
		}
		if c != s.client {
			ctx, cancel := context.WithTimeout(context.Background(), s.o.connectTimeout)
			err := c.Ping(ctx).Err()
			cancel()
			if err != nil {
				if !s.o.startDegraded {
					return fmt.Errorf("redisstore: redis for priorities %s unreachable: %w", sh.label, err)
				}
				sh.markDown(err)
			}
		} else if s.down {
			sh.markDown(errors.New("unreachable at start"))
		}
	}
	fb, err := newFallback[T](s.o.fallbackSize, cfg, s.byPrio)
	if err != nil {
		return fmt.Errorf("redisstore: the outage fallback: %w", err)
	}
	s.fb = fb
	s.bound = true
	return nil
}

// Start loads the scripts and starts the background work: per shard a
// health check and a wake-up listener, the rescue of expired leases, and
// leader election with the janitor. It returns at once.
func (s *Store[T]) Start(ctx context.Context) error {
	for _, sh := range s.shards {
		if !sh.healthy.Load() {
			continue
		}
		if err := sh.loadScripts(ctx); err != nil {
			if !isOutage(ctx, err) {
				return fmt.Errorf("redisstore: loading scripts: %w", err)
			}
			s.markDown(sh, err)
		}
	}
	if err := s.checkShardDatabases(ctx); err != nil {
		return err
	}
	s.startOnce.Do(func() {
		for _, sh := range s.shards {
			s.wg.Add(3)
			go s.healthLoop(sh)
			go s.listen(sh)
			go s.inboxWaker(sh)
		}
		s.wg.Add(5)
		go s.dueLoop()
		go s.leaderLoop()
		go s.rescueLoop()
		go s.watchTargets(s.subscribeTargets())
		go s.fleetLoop()
		close(s.started)
	})
	return nil
}

// checkShardDatabases refuses two shards on one Redis database: every key
// of the queue is under one hash tag with no shard part, so they would
// share the keys, the capacity count and the dedupe sets while each
// believed itself alone. Shards on one server but different databases
// (DB numbers) are separate. Only plain clients (*redis.Client) are
// checked, by the server's run_id and the client's DB; an unreachable
// shard is checked when it is not, at the next Start.
func (s *Store[T]) checkShardDatabases(ctx context.Context) error {
	if len(s.shards) < 2 {
		return nil
	}
	seen := map[string]*shard{}
	for _, sh := range s.shards {
		c, ok := sh.client.(*redis.Client)
		if !ok || !sh.healthy.Load() {
			continue
		}
		info, err := c.Info(ctx, "server").Result()
		if err != nil {
			if isOutage(ctx, err) {
				continue
			}
			return fmt.Errorf("redisstore: reading the server of priorities %s: %w", sh.label, err)
		}
		id := infoField(info, "run_id")
		if id == "" {
			continue
		}
		db := c.Options().DB
		k := fmt.Sprintf("%s/%d", id, db)
		if o, dup := seen[k]; dup {
			return fmt.Errorf("redisstore: WithShard: priorities %s and %s are served by one Redis database (server run_id %s, db %d), so their keys would collide; give them one client, or each a Redis (or DB) of its own",
				o.label, sh.label, id, db)
		}
		seen[k] = sh
	}
	return nil
}

// infoField returns the value of field in an INFO reply, "" if absent.
func infoField(info, field string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// Drain makes Claim return storekit.ErrDrained as soon as this process holds
// no ready fallback job: the Redis backlog is shared with other processes
// and stays for them.
func (s *Store[T]) Drain() {
	s.drainOnce.Do(func() { close(s.drained) })
}

// Close stops the background work and waits for it or for ctx. It gives up
// leadership, writes back what the fallback holds if Redis answers, and
// logs what it could not write back (lost with this process). It does not
// close the Redis clients.
func (s *Store[T]) Close(ctx context.Context) error {
	s.closeMu.Do(func() { close(s.closing) })
	for _, sh := range s.shards {
		sh.unpin() // an Add from now on takes the pool
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	if s.lead.Resign() {
		sh := s.shards[0]
		_ = scriptLeaderRelease.Run(ctx, sh.client, []string{sh.ks.leader}, s.owner).Err()
	}
	s.leaveFleet(ctx)
	for _, sh := range s.shards {
		if err := s.flushPending(ctx, sh); err == nil {
			_ = s.writeBack(ctx, sh)
		}
	}
	s.fbMu.Lock()
	left := s.fb.held()
	s.fbMu.Unlock()
	s.claimMu.Lock()
	unflushed := len(s.pending)
	s.claimMu.Unlock()
	if left > 0 || unflushed > 0 {
		s.cfg.Logger.Error("redisstore: closing with work Redis never received",
			"fallback_jobs", left, "unrecorded_finishes", unflushed)
	}
	return nil
}

// Len returns the number of ready jobs in Redis as last seen, the same
// for every process: every script call reports the count, and each
// process re-reads it every poll interval (at most 1 s) from Start on,
// idle or not, so a process that has not added or claimed yet sees the
// queue's fill too.
func (s *Store[T]) Len() int {
	n := s.fbReady.Load()
	for _, sh := range s.shards {
		n += sh.ready.Load()
	}
	return int(n)
}

// HeartbeatInterval is a third of the lease TTL.
func (s *Store[T]) HeartbeatInterval() time.Duration { return s.o.HeartbeatInterval() }

// Stats returns counts kept by the scripts (no scan of any queue), the
// state of leadership and of the Redis connections, and what the fallback
// holds.
func (s *Store[T]) Stats(ctx context.Context) (storekit.Stats, error) {
	st := storekit.Stats{
		Backend: "redis", Healthy: true, Leader: s.lead.Leading(),
		ReadyByPriority: map[string]int{},
	}
	for _, p := range s.cfg.Priorities {
		st.ReadyByPriority[p.Name] = 0
	}
	var detail []string
	for _, sh := range s.shards {
		if !sh.healthy.Load() {
			st.Healthy = false
			detail = append(detail, fmt.Sprintf("redis %s unreachable (%s)", sh.label, sh.lastError()))
			continue
		}
		if err := s.shardStats(ctx, sh, &st); err != nil {
			if !isOutage(ctx, err) {
				return st, err
			}
			s.markDown(sh, err)
			st.Healthy = false
			detail = append(detail, fmt.Sprintf("redis %s unreachable (%v)", sh.label, err))
		}
	}
	s.fbMu.Lock()
	fst := s.fb.stats()
	held, running := s.fb.held(), fst.Running
	for p, n := range fst.ReadyByPriority {
		st.ReadyByPriority[p] += n
	}
	st.Ready += fst.Ready
	st.Scheduled += fst.Scheduled
	st.Waiting += fst.Waiting
	st.Running += running
	st.PendingKeys += fst.PendingKeys + len(s.fb.away)
	s.fbMu.Unlock()
	if !st.Healthy || held+running > 0 {
		detail = append(detail, fmt.Sprintf("fallback: in-memory, %d jobs waiting, %d running", held, running))
	}
	if len(detail) == 0 {
		detail = append(detail, "redis: ok")
	}
	st.Detail = strings.Join(detail, "; ")
	return st, nil
}

func (s *Store[T]) shardStats(ctx context.Context, sh *shard, st *storekit.Stats) error {
	// The inboxes' jobs are ready jobs: drained into the counters first.
	if err := s.runInbox(ctx, sh, false); err != nil {
		return err
	}
	k := sh.ks.fixed
	pipe := sh.client.Pipeline()
	counts := pipe.HGetAll(ctx, k[kCount])
	sched := pipe.ZCard(ctx, k[kSched])
	run := pipe.ZCard(ctx, k[kRun])
	keys := pipe.HLen(ctx, k[kKeys])
	reruns := pipe.HLen(ctx, k[kReruns])
	dead := pipe.ZCard(ctx, k[kDead])
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	ready := 0
	for f, v := range counts.Val() {
		if l, ok := strings.CutPrefix(f, "r:"); ok && sh.serves(l) {
			n := int(replyInt(v))
			st.ReadyByPriority[l] += n
			ready += n
		}
	}
	st.Ready += ready
	sh.ready.Store(int64(ready))
	st.Scheduled += int(sched.Val())
	st.Running += int(run.Val())
	st.PendingKeys += int(keys.Val())
	st.Waiting += int(reruns.Val())
	st.Dead += int(dead.Val())
	return nil
}

func (sh *shard) lastError() string {
	if p := sh.lastErr.Load(); p != nil {
		return *p
	}
	return "unknown error"
}

// Scheduled returns up to n scheduled jobs, earliest first.
func (s *Store[T]) Scheduled(ctx context.Context, n int) ([]queue.ScheduledJob, error) {
	if n <= 0 {
		return nil, nil
	}
	var out []queue.ScheduledJob
	for _, sh := range s.shards {
		if !sh.healthy.Load() {
			continue
		}
		jobs, err := s.shardScheduled(ctx, sh, n)
		if err != nil {
			if !isOutage(ctx, err) {
				return nil, err
			}
			s.markDown(sh, err)
		}
		out = append(out, jobs...)
	}
	s.fbMu.Lock()
	fbJobs := s.fb.scheduled(n)
	s.fbMu.Unlock()
	out = append(out, fbJobs...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].RunAt.Before(out[j].RunAt) })
	if len(out) > n {
		out = out[:n]
	}
	return out, nil
}

func (s *Store[T]) shardScheduled(ctx context.Context, sh *shard, n int) ([]queue.ScheduledJob, error) {
	zs, err := sh.client.ZRangeWithScores(ctx, sh.ks.fixed[kSched], 0, int64(n-1)).Result()
	if err != nil || len(zs) == 0 {
		return nil, err
	}
	ids := make([]string, len(zs))
	for i, z := range zs {
		ids[i] = replyString(z.Member)
	}
	metas, err := sh.client.HMGet(ctx, sh.ks.fixed[kMeta], ids...).Result()
	if err != nil {
		return nil, err
	}
	out := make([]queue.ScheduledJob, 0, len(zs))
	for i, raw := range metas {
		m, ok := parseMeta(raw)
		if !ok {
			continue
		}
		out = append(out, queue.ScheduledJob{ID: replyInt(ids[i]), Key: m.Key, Group: m.Group,
			Target: m.Target, Priority: m.Priority, RunAt: time.UnixMilli(int64(zs[i].Score)),
			Attempt: m.Attempt})
	}
	return out, nil
}

// signal wakes one waiting Claim.
func (s *Store[T]) signal() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// markDown switches sh to the fallback after a failed operation.
func (s *Store[T]) markDown(sh *shard, err error) {
	if sh.markDown(err) {
		s.cfg.Logger.Warn("redisstore: redis unreachable, using the in-memory fallback",
			"priorities", sh.label, "err", err)
		s.signal()
	}
}

func (s *Store[T]) isClosing() bool {
	select {
	case <-s.closing:
		return true
	default:
		return false
	}
}

func (s *Store[T]) isDrained() bool {
	select {
	case <-s.drained:
		return true
	case <-s.closing:
		return true
	default:
		return false
	}
}
