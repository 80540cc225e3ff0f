package pgstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/pgstore"
	"github.com/queuekit/queue/queuetest"
	"github.com/queuekit/queue/queuetype"
	"github.com/queuekit/queue/storekit"
	"github.com/queuekit/queue/storetest"
)

type P = storetest.Payload

var epoch = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func jobsTable(e *env) string { return pgx.Identifier{e.schema, "queuekit_jobs"}.Sanitize() }

// TestQueueEndToEnd runs a queue.Queue on the store: every job runs once
// and ends completed in the table.
func TestQueueEndToEnd(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := newStore[P](t, e)
	var mu sync.Mutex
	seen := map[int]int{}
	// EventDone comes after the store wrote the outcome.
	var done queuetest.Counter
	q, err := queue.NewWithStore(s, func(ctx context.Context, j queue.Job[P]) error {
		mu.Lock()
		seen[j.Payload.N]++
		mu.Unlock()
		return nil
	}, queue.WithName("e2e"), queue.WithWorkers(4, 4), queue.WithLogger(quietLogger()), queue.WithObserver(func(ev queue.Event) {
		if ev.Kind == queue.EventDone {
			done.Add()
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	const n = 300
	for i := range n {
		if err := q.Enqueue(bg, queue.Job[P]{Payload: P{N: i}, Key: fmt.Sprint("k", i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Start(bg); err != nil {
		t.Fatal(err)
	}
	queuetest.Await(t, done.Reached(n), 20*time.Second, "all jobs done")
	if c := count(t, e.pool, "SELECT count(*) FROM "+jobsTable(e)+" WHERE state = 'completed'"); c != n {
		t.Fatalf("%d jobs completed in the table, want %d", c, n)
	}
	ctx, cancel := context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	if err := q.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != n {
		t.Fatalf("ran %d distinct jobs, want %d", len(seen), n)
	}
	for k, c := range seen {
		if c != 1 {
			t.Fatalf("job %d ran %d times", k, c)
		}
	}
	st := q.Stats()
	if st.Done != n || st.Store.Backend != "postgres" || !st.Store.Healthy {
		t.Fatalf("stats: done %d, store %+v", st.Done, st.Store)
	}
}

// TestMigrateConcurrent: racing Migrate calls all succeed and apply each
// migration once; a second round is a no-op.
func TestMigrateConcurrent(t *testing.T) {
	t.Parallel()
	requirePG(t)
	pool := newPool(t, pgURL(), 8)
	schema := "qt_migrate_race_" + fmt.Sprint(time.Now().UnixNano()%1e9)
	t.Cleanup(func() { _, _ = pool.Exec(bg, "DROP SCHEMA IF EXISTS "+schema+" CASCADE") })
	for round := range 2 {
		var wg sync.WaitGroup
		errs := make(chan error, 6)
		for range 6 {
			wg.Go(func() { errs <- pgstore.Migrate(bg, pool, pgstore.WithSchema(schema)) })
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("round %d: Migrate: %v", round, err)
			}
		}
	}
	if n := count(t, pool, "SELECT count(*) FROM "+schema+".queuekit_migrations"); n != len(pgstore.Migrations()) {
		t.Fatalf("%d migrations recorded, want %d", n, len(pgstore.Migrations()))
	}
}

func TestBadNames(t *testing.T) {
	t.Parallel()
	requirePG(t)
	pool := newPool(t, pgURL(), 2)
	for _, bad := range []string{"", "a b", `x"; DROP TABLE y; --`, "1abc", strings.Repeat("a", 64), "ümlaut"} {
		_, err := pgstore.New[P](pool, pgstore.WithSchema(bad))
		var oe *queue.OptionError
		if !errors.As(err, &oe) {
			t.Errorf("WithSchema(%q): err %v, want *queue.OptionError", bad, err)
		}
		if err := pgstore.Migrate(bg, pool, pgstore.WithSchema(bad)); err == nil {
			t.Errorf("Migrate with schema %q succeeded", bad)
		}
	}
	s, err := pgstore.New[P](pool)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", "a b", "q'; DROP", strings.Repeat("q", 64)} {
		cfg := storetest.Config(bad, 10, queuetest.NewFakeClock(epoch), func(queue.Event) {})
		if err := s.Init(cfg); err == nil {
			t.Errorf("Init with queue name %q succeeded", bad)
		}
	}
	// queue.New surfaces the store's refusal.
	if _, err := queue.NewWithStore(s, func(context.Context, queue.Job[P]) error { return nil }, queue.WithName("no spaces allowed")); err == nil {
		t.Error("queue.New accepted a queue name pgstore refuses")
	}
	if _, err := pgstore.New[P](nil); err == nil {
		t.Error("New(nil pool) succeeded")
	}
	for _, opt := range []pgstore.Option{pgstore.WithMaxPayload(0), pgstore.WithLeaseTTL(0), pgstore.WithLeaderTTL(time.Millisecond),
		pgstore.WithPollInterval(0), pgstore.WithJanitorInterval(0), pgstore.WithCompletedRetention(-1), pgstore.WithDeadRetention(-1), pgstore.WithBatchSizes(0, 1),
		pgstore.WithCodec(nil), pgstore.WithWorkerID("")} {
		if _, err := pgstore.New[P](pool, opt); err == nil {
			t.Errorf("New accepted a bad option %v", opt)
		}
	}
}

// badPayload cannot be encoded when Fail is set.
type badPayload struct {
	Fail bool   `json:"fail,omitempty"`
	S    string `json:"s"`
}

func (p badPayload) MarshalJSON() ([]byte, error) {
	if p.Fail {
		return nil, errors.New("cannot encode")
	}
	type plain badPayload
	return json.Marshal(plain(p))
}

func TestBadPayloads(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := newStore[badPayload](t, e, pgstore.WithMaxPayload(64))
	clk := queuetest.NewFakeClock(epoch)
	// The store reports EventDead once it has dead-lettered the row.
	dead := make(chan struct{})
	var deadOnce sync.Once
	var deadErr error // the cause reported with EventDead, read after dead closes
	events := bind(t, s, "bad", clk, func(c *storekit.Config) {
		log := c.Report
		c.Report = func(ev queue.Event) {
			log(ev)
			if ev.Kind == queue.EventDead {
				deadOnce.Do(func() { deadErr = ev.Err; close(dead) })
			}
		}
	})
	table := jobsTable(e)

	// Cannot be encoded: error, nothing inserted.
	if _, err := s.Add(bg, queue.Job[badPayload]{Key: "enc", Payload: badPayload{Fail: true}}); err == nil {
		t.Fatal("Add of an unencodable payload succeeded")
	}
	// Too large: ErrPayloadTooLarge naming the size and the limit,
	// nothing inserted.
	_, err := s.Add(bg, queue.Job[badPayload]{Key: "big", Payload: badPayload{S: strings.Repeat("x", 100)}})
	if !errors.Is(err, queue.ErrPayloadTooLarge) {
		t.Fatalf("Add of a large payload: %v, want queue.ErrPayloadTooLarge", err)
	}
	// The same words as redisstore's (its TestPayloadTooLarge).
	if want := "queue: payload too large: 108 bytes, limit 64"; err.Error() != want {
		t.Fatalf("Add of a large payload: %q, want %q", err, want)
	}
	if _, err := s.EnqueueMany(bg, []queue.Job[badPayload]{{Payload: badPayload{S: "ok"}}, {Payload: badPayload{S: strings.Repeat("x", 100)}}}); err == nil {
		t.Fatal("EnqueueMany with a large payload succeeded")
	}
	if n := count(t, e.pool, "SELECT count(*) FROM "+table); n != 0 {
		t.Fatalf("%d rows inserted by refused jobs", n)
	}

	// A row whose payload does not decode is dead-lettered; the next job
	// is handed out.
	if _, err := e.pool.Exec(bg, "INSERT INTO "+table+" (queue, state, priority, run_at, payload) VALUES ('bad', 'available', 5, $1, 'not json')", epoch.Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Add(bg, queue.Job[badPayload]{Payload: badPayload{S: "good"}}); err != nil {
		t.Fatal(err)
	}
	j := claimWithin(t, s, 5*time.Second)
	if j.Payload.S != "good" {
		t.Fatalf("Claim = %+v; want the good job", j)
	}
	queuetest.Await(t, dead, 10*time.Second, "EventDead for the undecodable job")
	// The cause is the core's *queue.DecodeError, as on redisstore.
	var decodeErr *queue.DecodeError
	if !errors.As(deadErr, &decodeErr) || decodeErr.JobID == 0 || decodeErr.Err == nil {
		t.Fatalf("EventDead cause %v, want a *queue.DecodeError naming the job", deadErr)
	}
	if n := count(t, e.pool, "SELECT count(*) FROM "+table+" WHERE state = 'dead' AND last_error LIKE '%decoding payload%'"); n != 1 {
		t.Fatalf("%d undecodable jobs dead-lettered in the table, want 1", n)
	}
	if n := events.Count(queue.EventDead); n != 1 {
		t.Fatalf("%d EventDead reported, want 1", n)
	}
	if err := s.Complete(bg, j); err != nil {
		t.Fatal(err)
	}
}

// TestEnqueueTx: a job enqueued in a transaction exists only if it commits,
// and a duplicate does not abort the transaction.
func TestEnqueueTx(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := newStore[P](t, e)
	bind(t, s, "tx", nil)
	table := jobsTable(e)

	tx, err := e.pool.Begin(bg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.EnqueueTx(bg, tx, queue.Job[P]{Key: "rolled-back"}); err != nil {
		t.Fatal(err)
	}
	_ = tx.Rollback(bg)

	err = pgx.BeginFunc(bg, e.pool, func(tx pgx.Tx) error {
		a, err := s.EnqueueTx(bg, tx, queue.Job[P]{Key: "k", Payload: P{N: 1}})
		if err != nil || a.ID == 0 {
			return fmt.Errorf("first: %+v, %w", a, err)
		}
		if _, err := s.EnqueueTx(bg, tx, queue.Job[P]{Key: "k"}); !errors.Is(err, queue.ErrDuplicate) {
			return fmt.Errorf("duplicate: %v, want ErrDuplicate", err)
		}
		// The transaction is still usable.
		_, err = tx.Exec(bg, "SELECT 1")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := count(t, e.pool, "SELECT count(*) FROM "+table); n != 1 {
		t.Fatalf("%d rows, want 1 (the committed job)", n)
	}
	j := claimWithin(t, s, 5*time.Second)
	if j.Key != "k" {
		t.Fatalf("Claim = %+v", j)
	}
	if err := s.Complete(bg, j); err != nil {
		t.Fatal(err)
	}
}

// TestEnqueueTxEnqueueHook: EnqueueTx runs the queue's enqueue hooks
// (storekit.Config.EnqueueHook) before it inserts: the row carries the
// Meta the hook left, and a refused job inserts nothing and leaves the
// caller's transaction usable.
func TestEnqueueTxEnqueueHook(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := newStore[P](t, e)
	bind(t, s, "txhook", nil, func(c *storekit.Config) {
		c.EnqueueHook = func(_ context.Context, j *storekit.HookJob) error {
			if j.Key == "refuse" {
				return errors.New("hook says no")
			}
			j.Meta.Set("trace", "t-"+j.Key)
			return nil
		}
	})
	err := pgx.BeginFunc(bg, e.pool, func(tx pgx.Tx) error {
		if _, err := s.EnqueueTx(bg, tx, queue.Job[P]{Key: "refuse"}); err == nil || !strings.Contains(err.Error(), "hook says no") {
			return fmt.Errorf("refused job: %v, want the hook's error", err)
		}
		_, err := s.EnqueueTx(bg, tx, queue.Job[P]{Key: "k"})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := count(t, e.pool, "SELECT count(*) FROM "+jobsTable(e)); n != 1 {
		t.Fatalf("%d rows, want 1 (the hook refused the other)", n)
	}
	j := claimWithin(t, s, 5*time.Second)
	if j.Key != "k" || j.Meta.Get("trace") != "t-k" {
		t.Fatalf("claimed %q with Meta trace %q, want k with t-k", j.Key, j.Meta.Get("trace"))
	}
	if err := s.Complete(bg, j); err != nil {
		t.Fatal(err)
	}
}

// TestEnqueueManyPlainAndCopy: a batch without keys stores the same rows
// whether it goes by an insert from arrays (below SetCopyMin's size) or
// by COPY: every column but the ID, for ready, scheduled and past-due
// jobs, priorities, targets, attempts and metadata, and for a batch whose
// jobs differ in their payloads only (sent once, not as arrays); the IDs
// come back in the batch's order.
func TestEnqueueManyPlainAndCopy(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := newStore[P](t, e)
	bind(t, s, "plaincopy", queuetest.NewFakeClock(epoch))
	mixed := func() []queue.Job[P] {
		var jobs []queue.Job[P]
		for i := range 40 {
			j := queue.Job[P]{Payload: P{N: i}, Priority: []string{"low", "normal", "high"}[i%3],
				Target: []string{"", "t1", "t2 ÿ"}[i%3], MaxAttempts: i % 4}
			if i%7 == 3 {
				j.Meta = queuetype.MetaOf(map[string]string{"n": strconv.Itoa(i), "q": "\"x\"\n"})
			}
			switch i {
			case 10:
				j.RunAt = epoch.Add(time.Hour)
			case 11:
				j.RunAt = epoch.Add(-time.Hour)
			}
			jobs = append(jobs, j)
		}
		return jobs
	}
	alike := func() []queue.Job[P] {
		var jobs []queue.Job[P]
		for i := range 40 {
			jobs = append(jobs, queue.Job[P]{Payload: P{N: i}, Priority: "high", Target: "t", MaxAttempts: 2})
		}
		return jobs
	}
	for _, batch := range []struct {
		name string
		jobs func() []queue.Job[P]
	}{{"mixed", mixed}, {"alike", alike}} {
		var rows [2][]string
		for k, copyMin := range []int{1000, 1} {
			pgstore.SetCopyMin(s, copyMin)
			added, err := s.EnqueueMany(bg, batch.jobs())
			require.NoError(t, err)
			require.Len(t, added, 40)
			ids := make([]int64, len(added))
			for i, a := range added {
				require.NotZero(t, a.ID, "%s, copyMin %d: job %d", batch.name, copyMin, i)
				require.Equal(t, batch.name == "mixed" && i == 10, a.Scheduled, "%s, copyMin %d: job %d", batch.name, copyMin, i)
				ids[i] = a.ID
			}
			res, err := e.pool.Query(bg, `SELECT (to_jsonb(j) - 'id' - 'payload')::text || ' ' || convert_from(j.payload, 'UTF8') FROM `+jobsTable(e)+` j
				JOIN unnest($1::bigint[]) WITH ORDINALITY AS u(id, ord) USING (id) ORDER BY u.ord`, ids)
			require.NoError(t, err)
			rows[k], err = pgx.CollectRows(res, pgx.RowTo[string])
			require.NoError(t, err)
			require.Len(t, rows[k], 40, "%s, copyMin %d: every ID is a row", batch.name, copyMin)
			require.Contains(t, rows[k][3], `{"n":3}`, "%s, copyMin %d: payload", batch.name, copyMin)
		}
		require.Equal(t, rows[0], rows[1], batch.name)
		if batch.name == "mixed" {
			require.Contains(t, rows[0][3], `"meta": {"n": "3"`)
			require.Contains(t, rows[0][10], `"state": "scheduled"`)
		}
	}
}

func TestEnqueueMany(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := newStore[P](t, e)
	clk := queuetest.NewFakeClock(epoch)
	log := bind(t, s, "many", clk, func(c *storekit.Config) { c.Capacity = 10000 })

	// No keys: the insert from arrays (COPY: TestEnqueueManyPlainAndCopy).
	var plain []queue.Job[P]
	for i := range 500 {
		plain = append(plain, queue.Job[P]{Payload: P{N: i}, Priority: []string{"low", "normal", "high"}[i%3]})
	}
	plain = append(plain, queue.Job[P]{Payload: P{N: 1000}, RunAt: epoch.Add(time.Hour)})
	added, err := s.EnqueueMany(bg, plain)
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range added {
		if a.ID == 0 || a.Scheduled != (i == 500) {
			t.Fatalf("added[%d] = %+v", i, a)
		}
	}
	// Keys: duplicates (in the table or the batch) are skipped, in order.
	if _, err := s.Add(bg, queue.Job[P]{Key: "taken"}); err != nil {
		t.Fatal(err)
	}
	keyed := []queue.Job[P]{{Key: "a"}, {Key: "taken"}, {Key: "b"}, {Key: "a"}, {Key: "g1", Group: "g", RunAt: epoch.Add(time.Hour)}, {Key: "g2", Group: "g", RunAt: epoch.Add(time.Hour)}}
	added, err = s.EnqueueMany(bg, keyed)
	if err != nil {
		t.Fatal(err)
	}
	var got []bool
	for _, a := range added {
		got = append(got, a.ID != 0)
	}
	if fmt.Sprint(got) != "[true false true false true false]" {
		t.Fatalf("inserted %v", got)
	}
	st, err := s.Stats(bg)
	if err != nil {
		t.Fatal(err)
	}
	if st.Ready != 503 || st.Scheduled != 2 || st.ReadyByPriority["high"] != 166 {
		t.Fatalf("stats %+v", st)
	}
	// Each inserted job is reported as enqueued, for the queue to count
	// and observe as Enqueue's (501 + 3; the Add above went around it).
	if n := log.Count(queue.EventEnqueued); n != 504 {
		t.Fatalf("reported %d enqueued; want 504", n)
	}
	// Priority order holds across the batch.
	if j := claimWithin(t, s, 5*time.Second); j.Priority != "high" || j.Payload.N != 2 {
		t.Fatalf("first claim %+v; want job 2 (the first high)", j)
	}
}

// TestNotifyWakesOtherProcess: a job added by one store is claimed by
// another within milliseconds although it polls once a minute.
// tracedConsumer returns a store on a pool of its own, polling once a
// minute, whose statements are traced: listening closes when the server
// has acknowledged its LISTEN, and idle receives after each of its claims
// that found no job (the fetcher's, or a write batch's for the workers
// whose outcomes it writes).
func tracedConsumer(t *testing.T, e *env, opts ...pgstore.Option) (consumer *pgstore.Store[P], listening, idle <-chan struct{}) {
	t.Helper()
	listen := make(chan struct{})
	var listenOnce sync.Once
	idl := make(chan struct{}, 1)
	consumer = tracedStore(t, e, func(sql string, claim bool, tag pgconn.CommandTag, err error) {
		switch {
		case err != nil:
		case strings.HasPrefix(sql, "LISTEN "):
			listenOnce.Do(func() { close(listen) })
		case claim && tag.RowsAffected() == 0:
			select {
			case idl <- struct{}{}:
			default:
			}
		}
	}, opts...)
	return consumer, listen, idl
}

func TestNotifyWakesOtherProcess(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	producer := newStore[P](t, e, pgstore.WithPollInterval(time.Minute))
	consumer, listening, idle := tracedConsumer(t, e)
	bind(t, producer, "wake", nil)
	bind(t, consumer, "wake", nil)
	queuetest.Await(t, listening, 10*time.Second, "the consumer to listen")
	for i := range 3 {
		got := make(chan time.Duration, 1)
		go func() {
			ctx, cancel := context.WithTimeout(bg, 10*time.Second)
			defer cancel()
			j, err := consumer.Claim(ctx)
			if err != nil {
				got <- -1
				return
			}
			select { // a stale signal, from before this job's claim
			case <-idle:
			default:
			}
			// The outcome's write batch claims the worker's next job,
			// finds none and the queue stays dry: the next Claim waits
			// for a wake-up without a claim of its own.
			_ = consumer.Complete(bg, j)
			got <- 0
		}()
		// Once the consumer has looked and found nothing, only a wake-up
		// can bring it the job before its next poll, a minute away.
		select {
		case <-idle:
		case <-time.After(10 * time.Second):
			t.Fatal("timed out waiting for the consumer to find no job and wait")
		}
		start := time.Now()
		if _, err := producer.Add(bg, queue.Job[P]{Payload: P{N: i}}); err != nil {
			t.Fatal(err)
		}
		if d := <-got; d < 0 {
			t.Fatal("consumer got no job")
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Fatalf("job %d took %s to reach the other store; NOTIFY did not wake it", i, took)
		} else {
			t.Logf("job %d reached the other store in %s", i, took)
		}
	}
}

// TestPollingOnly: with LISTEN off, polling alone moves jobs between
// processes, scheduled ones included.
func TestPollingOnly(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	producer := newStore[P](t, e, pgstore.WithListen(false), pgstore.WithPollInterval(50*time.Millisecond))
	consumer := newStore[P](t, e, pgstore.WithListen(false), pgstore.WithPollInterval(50*time.Millisecond))
	bind(t, producer, "poll", nil)
	bind(t, consumer, "poll", nil)
	if _, err := producer.Add(bg, queue.Job[P]{Payload: P{N: 1}}); err != nil {
		t.Fatal(err)
	}
	if _, err := producer.Add(bg, queue.Job[P]{Payload: P{N: 2}, RunAt: time.Now().Add(200 * time.Millisecond)}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		ctx, cancel := context.WithTimeout(bg, 5*time.Second)
		j, err := consumer.Claim(ctx)
		cancel()
		if err != nil {
			t.Fatalf("Claim by polling: %v", err)
		}
		if err := consumer.Complete(bg, j); err != nil {
			t.Fatal(err)
		}
	}
	st, _ := consumer.Stats(bg)
	if !strings.Contains(st.Detail, "listen: off") {
		t.Fatalf("detail %q", st.Detail)
	}
}

// TestLeaderHandover: exactly one of two stores leads; when it closes, the
// other takes over at once.
func TestLeaderHandover(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := newStore[P](t, e, pgstore.WithLeaderTTL(time.Second), pgstore.WithWorkerID("a"))
	b := newStore[P](t, e, pgstore.WithLeaderTTL(time.Second), pgstore.WithWorkerID("b"))
	bind(t, a, "lead", nil)
	bind(t, b, "lead", nil)
	// Leadership is a row in the database, with an expiry in database
	// time, taken by each store's election loop: polled.
	require.Eventually(t, func() bool { return a.Leader() || b.Leader() }, 10*time.Second, pollTick, "a leader")
	leader, other := a, b
	if b.Leader() {
		leader, other = b, a
	}
	if other.Leader() {
		t.Fatal("two leaders")
	}
	st, _ := leader.Stats(bg)
	if !st.Leader {
		t.Fatal("Stats.Leader false on the leader")
	}
	start := time.Now()
	if err := leader.Close(bg); err != nil {
		t.Fatal(err)
	}
	require.Eventually(t, other.Leader, 3*time.Second, pollTick, "the other store to lead")
	t.Logf("handover after Close took %s", time.Since(start))
}

// TestUnreachable: a store whose database cannot be reached starts, says
// so in Stats, and returns the error from Add; it recovers when the
// database comes back.
func TestUnreachable(t *testing.T) {
	t.Parallel()
	requirePG(t)
	e := newEnv(t)
	p := storetest.NewProxy(t, pgHostPort(t))
	p.Down()
	pool := proxiedPool(t, p, 4)
	s, err := pgstore.New[P](pool, pgstore.WithSchema(e.schema), pgstore.WithPollInterval(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	bind(t, s, "down", nil)
	if _, err := s.Add(bg, queue.Job[P]{}); err == nil {
		t.Fatal("Add succeeded with the database down")
	}
	st, err := s.Stats(bg)
	if err == nil || st.Healthy || st.Backend != "postgres" {
		t.Fatalf("Stats = %+v, %v; want unhealthy and an error", st, err)
	}
	p.Up()
	// Stats asks the server: whether it answers again is the server's
	// (and the pool's reconnection's) business, with no event: polled.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		st, err := s.Stats(bg)
		require.NoError(c, err)
		assert.True(c, st.Healthy, "Stats %+v", st)
	}, 10*time.Second, pollTick, "healthy again")
	if _, err := s.Add(bg, queue.Job[P]{}); err != nil {
		t.Fatal(err)
	}
}

// TestRescueAndRetention: an expired lease on the last attempt
// dead-letters the job and releases its rerun; Retry and Dead keep an
// error history; old final rows are pruned.
func TestRescueAndRetention(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := newStore[P](t, e, pgstore.WithJanitorInterval(time.Hour), pgstore.WithLeaseTTL(time.Minute), pgstore.WithCompletedRetention(time.Hour), pgstore.WithDeadRetention(2*time.Hour))
	clk := queuetest.NewFakeClock(epoch)
	events := bind(t, s, "rescue", clk)
	table := jobsTable(e)
	claim := func() queue.Job[P] { t.Helper(); return claimWithin(t, s, 5*time.Second) }
	if _, err := s.Add(bg, queue.Job[P]{Key: "k", MaxAttempts: 2}); err != nil {
		t.Fatal(err)
	}
	j := claim()
	if err := s.Retry(bg, j, clk.Now(), errors.New("first failure")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PromoteDue(bg); err != nil {
		t.Fatal(err)
	}
	j = claim()
	if j.Attempt != 2 {
		t.Fatalf("attempt %d", j.Attempt)
	}
	if a, err := s.Add(bg, queue.Job[P]{Key: "k", Payload: P{N: 99}}); err != nil || !a.Coalesced {
		t.Fatalf("rerun: %+v, %v", a, err)
	}
	clk.Advance(2 * time.Minute) // the worker "died": its lease expired
	if n, err := s.RescueExpired(bg); err != nil || n != 1 {
		t.Fatalf("RescueExpired = %d, %v", n, err)
	}
	if events.Count(queue.EventDead) != 1 {
		t.Fatal("no EventDead for the job that used its last attempt")
	}
	var hist []map[string]any
	if err := e.pool.QueryRow(bg, "SELECT errors FROM "+table+" WHERE id = $1 AND state = 'dead'", j.ID).Scan(&hist); err != nil {
		t.Fatal(err)
	}
	if len(hist) != 2 || hist[0]["error"] != "first failure" || !strings.Contains(fmt.Sprint(hist[1]["error"]), "lease expired") {
		t.Fatalf("error history %v", hist)
	}
	if err := s.Complete(bg, j); !errors.Is(err, pgstore.ErrLeaseLost) {
		t.Fatalf("Complete after rescue = %v, want ErrLeaseLost", err)
	}
	r := claim() // the rerun was released
	if r.Payload.N != 99 {
		t.Fatalf("got %+v, want the rerun", r)
	}
	if err := s.Complete(bg, r); err != nil {
		t.Fatal(err)
	}
	clk.Advance(90 * time.Minute)
	if n, err := s.Prune(bg); err != nil || n != 1 {
		t.Fatalf("Prune = %d, %v; want the completed rerun only", n, err)
	}
	clk.Advance(time.Hour)
	if n, err := s.Prune(bg); err != nil || n != 1 {
		t.Fatalf("Prune = %d, %v; want the dead job", n, err)
	}
}

// TestCoalesceRace: Adds of a running key racing with its completion never
// leave a rerun behind with no running job to release it.
func TestCoalesceRace(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := newStore[P](t, e)
	bind(t, s, "race", nil)
	table := jobsTable(e)
	stop := make(chan struct{})
	var adds atomic.Int64
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := s.Add(bg, queue.Job[P]{Key: "hot"}); err == nil {
					adds.Add(1)
				}
			}
		})
	}
	var runs int
	for runs < 150 {
		ctx, cancel := context.WithTimeout(bg, 5*time.Second)
		j, err := s.Claim(ctx)
		cancel()
		if err != nil {
			t.Fatalf("after %d runs: Claim: %v (rerun lost?)", runs, err)
		}
		runs++
		if err := s.Complete(bg, j); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	// Whatever is left is one waiting job, claimable now.
	for {
		n := count(t, e.pool, "SELECT count(*) FROM "+table+" WHERE state IN ('available', 'pending', 'running', 'retryable')")
		if n == 0 {
			break
		}
		if p := count(t, e.pool, "SELECT count(*) FROM "+table+" WHERE state = 'pending'"); p > 0 &&
			count(t, e.pool, "SELECT count(*) FROM "+table+" WHERE state = 'running'") == 0 {
			t.Fatal("a rerun waits with no running job")
		}
		ctx, cancel := context.WithTimeout(bg, 5*time.Second)
		j, err := s.Claim(ctx)
		cancel()
		if err != nil {
			t.Fatalf("draining: %v", err)
		}
		runs++
		if err := s.Complete(bg, j); err != nil {
			t.Fatal(err)
		}
	}
	if int64(runs) != adds.Load() {
		t.Fatalf("%d runs for %d accepted adds", runs, adds.Load())
	}
}

// pgHostPort is the test server's address, for the proxy.
func pgHostPort(t *testing.T) string {
	cfg, err := pgxpool.ParseConfig(pgURL())
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%s:%d", cfg.ConnConfig.Host, cfg.ConnConfig.Port)
}

// A claimed job whose target was disabled ends in the cancelled state,
// with its reason, and its key is free again.
func TestCancelClaimed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := newStore[P](t, e)
	bind(t, s, "cancelclaimed", nil)
	table := jobsTable(e)
	if _, err := s.Add(bg, queue.Job[P]{Key: "k", Target: "gone"}); err != nil {
		t.Fatal(err)
	}
	j := claimWithin(t, s, 5*time.Second)
	if err := s.CancelClaimed(bg, j, errors.New("target disabled")); err != nil {
		t.Fatal(err)
	}
	var state, lastErr string
	if err := e.pool.QueryRow(bg, "SELECT state, last_error FROM "+table+" WHERE id = $1", j.ID).Scan(&state, &lastErr); err != nil {
		t.Fatal(err)
	}
	if state != "cancelled" || lastErr != "target disabled" {
		t.Fatalf("row: state %q, last_error %q; want cancelled, target disabled", state, lastErr)
	}
	if _, err := s.Add(bg, queue.Job[P]{Key: "k"}); err != nil {
		t.Fatalf("Add after cancel: %v (the key should be free)", err)
	}
}

// TestOutcomesInOneBatch: outcomes of every kind written at once (so that
// the writer batches them), in an order unrelated to the job IDs, each land
// on their own row with their own values; an outcome for a run this
// process no longer holds (another attempt) writes nothing.
func TestOutcomesInOneBatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := newStore[P](t, e)
	bind(t, s, "batch", nil)
	table := jobsTable(e)
	const n = 60
	jobs := make([]queue.Job[P], n)
	for i := range jobs {
		jobs[i] = queue.Job[P]{Payload: P{N: i}}
	}
	if _, err := s.EnqueueMany(bg, jobs); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	claimed := make([]queue.Job[P], 0, n)
	for range n {
		j, err := s.Claim(ctx)
		if err != nil {
			t.Fatal(err)
		}
		claimed = append(claimed, j)
	}
	// Reverse the claim order, so that batch order is not ID order.
	slices.Reverse(claimed)
	at := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, j := range claimed {
		wg.Go(func() {
			<-start
			cause := fmt.Errorf("cause %d", j.ID)
			switch i % 6 {
			case 0:
				errs[i] = s.Complete(bg, j)
			case 1:
				errs[i] = s.Dead(bg, j, cause)
			case 2:
				errs[i] = s.CancelClaimed(bg, j, cause)
			case 3:
				errs[i] = s.Retry(bg, j, at.Add(time.Duration(j.ID)*time.Second), cause)
			case 4:
				errs[i] = s.Defer(bg, j, at.Add(time.Duration(j.ID)*time.Second), nil)
			case 5:
				stale := j
				stale.Attempt++ // not the run this process holds
				errs[i] = s.Complete(bg, stale)
			}
		})
	}
	close(start)
	wg.Wait()
	for i, j := range claimed {
		var (
			state   string
			lastErr *string
			runAt   time.Time
			attempt int
		)
		if err := e.pool.QueryRow(bg, "SELECT state, last_error, run_at, attempt FROM "+table+" WHERE id = $1", j.ID).
			Scan(&state, &lastErr, &runAt, &attempt); err != nil {
			t.Fatal(err)
		}
		cause := fmt.Sprintf("cause %d", j.ID)
		le := ""
		if lastErr != nil {
			le = *lastErr
		}
		due := at.Add(time.Duration(j.ID) * time.Second)
		var ok bool
		switch i % 6 {
		case 0:
			ok = errs[i] == nil && state == "completed" && le == ""
		case 1:
			ok = errs[i] == nil && state == "dead" && le == cause
		case 2:
			ok = errs[i] == nil && state == "cancelled" && le == cause
		case 3:
			ok = errs[i] == nil && state == "retryable" && le == cause && runAt.Equal(due) && attempt == 1
		case 4:
			ok = errs[i] == nil && state == "retryable" && le == "" && runAt.Equal(due) && attempt == 0
		case 5:
			ok = errors.Is(errs[i], pgstore.ErrLeaseLost) && state == "running" && attempt == 1
		}
		if !ok {
			t.Errorf("job %d (outcome %d): err %v; row state %q, last_error %q, run_at %s, attempt %d",
				j.ID, i%6, errs[i], state, le, runAt, attempt)
		}
	}
}

// TestPruneKeepsUp: a pruning pass is bounded (20 statements of 1000
// rows), and one every 60 janitor intervals cannot keep up with a queue
// that finishes more than 333 jobs a second (at the default 1 s): the
// table grew without bound. A pass that hit its bound is followed by
// another at the next janitor tick.
func TestPruneKeepsUp(t *testing.T) {
	t.Parallel()
	const rows = 45000 // three passes' worth
	e := newEnv(t)
	s := newStore[P](t, e, pgstore.WithJanitorInterval(200*time.Millisecond), pgstore.WithCompletedRetention(time.Minute), pgstore.WithDeadRetention(time.Minute))
	clk := queuetest.NewFakeClock(epoch)
	table := jobsTable(e)
	if _, err := e.pool.Exec(bg, "INSERT INTO "+table+` (queue, state, run_at, payload, finalized_at)
		SELECT 'prune', 'completed', $1, '\x7b7d', $1 FROM generate_series(1, $2)`, epoch.Add(-time.Hour), rows); err != nil {
		t.Fatal(err)
	}
	bind(t, s, "prune", clk)
	// Pruning is the leader's, in the server: poll the rows left. Without
	// the follow-up passes the second one would come 12 s (60 janitor
	// intervals) after the first.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Zero(c, count(c, e.pool, "SELECT count(*) FROM "+table+" WHERE queue = 'prune'"))
	}, 8*time.Second, pollTick, "old completed rows left after 8 s")
}

// TestReleasedJobsWakeOtherProcess: jobs a closing store claimed but never
// handed out are given back, and another store waiting for work gets them
// at once, not at its next poll: the release notifies as inserts do.
func TestReleasedJobsWakeOtherProcess(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	closing := newStore[P](t, e, pgstore.WithPollInterval(time.Minute))
	consumer, listening, idle := tracedConsumer(t, e)
	bind(t, closing, "release", nil)
	bind(t, consumer, "release", nil)
	queuetest.Await(t, listening, 10*time.Second, "the consumer to listen")
	added, err := closing.EnqueueMany(bg, []queue.Job[P]{{Payload: P{N: 1}}, {Payload: P{N: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	// The closing store's worker takes the first job; its completion
	// has the fetcher claim the second, beside the write, for the
	// worker's next Claim, which never comes.
	j := claimWithin(t, closing, 10*time.Second)
	if err := closing.Complete(bg, j); err != nil {
		t.Fatal(err)
	}
	require.Eventually(t, func() bool { return pgstore.AheadClaimed(closing) }, 10*time.Second, time.Millisecond,
		"the fetcher's claim for the worker expected back")
	table := jobsTable(e)
	if n := count(t, e.pool, "SELECT count(*) FROM "+table+" WHERE id = $1 AND state = 'running'", added[1].ID); n != 1 {
		t.Fatal("the second job was not claimed ahead for the worker expected back")
	}
	got := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(bg, 5*time.Second)
		defer cancel()
		j, err := consumer.Claim(ctx)
		if err == nil && j.ID != added[1].ID {
			err = fmt.Errorf("claimed job %d, want %d", j.ID, added[1].ID)
		}
		got <- err
	}()
	// Once the consumer has looked and found nothing, only a wake-up can
	// bring it the job before its next poll, a minute away.
	queuetest.Await(t, idle, 10*time.Second, "the consumer to find no job and wait")
	if err := closing.Close(bg); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("the released job did not reach the waiting store: %v", err)
	}
}

// TestIdleClaimDoesNotSpin: a Claim waiting on an empty queue costs a
// claim statement when it starts and on wake-ups, not a loop of them (the
// fetcher used to wake itself after each claim that found nothing, and
// ran 18 000 a second for as long as a worker waited).
func TestIdleClaimDoesNotSpin(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var claims atomic.Int64
	s := tracedStore(t, e, func(_ string, claim bool, _ pgconn.CommandTag, _ error) {
		if claim {
			claims.Add(1)
		}
	})
	bind(t, s, "idle", nil)
	// A window in which nothing happens: the Claim's own deadline.
	ctx, cancel := context.WithTimeout(bg, 300*time.Millisecond)
	defer cancel()
	if _, err := s.Claim(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Claim on an empty queue = %v", err)
	}
	// The first look, the look when LISTEN starts, and perhaps one more.
	if n := claims.Load(); n > 5 {
		t.Fatalf("%d claim statements while one Claim waited 300 ms on an empty queue", n)
	}
}

// TestDryQueueClaimsOnWakeUp: once a claim found the queue without a job
// (here the fetcher's claim for the worker whose completion was written),
// workers that come back and wait make no claim of their own — the claim
// would find nothing — and the next wake-up (an Add) brings them the next
// job at once. LISTEN is off, so that no wake-up comes but the test's:
// the notification of the store's own first Add, arriving late, is one.
func TestDryQueueClaimsOnWakeUp(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var (
		claims                   atomic.Int64
		fromSQL, weightedFromSQL atomic.Pointer[string]
		dry                      = make(chan struct{}, 1)
	)
	s := tracedStore(t, e, func(sql string, claim bool, tag pgconn.CommandTag, err error) {
		if err == nil && claim {
			claims.Add(1)
			// An empty claim from the claim hint is claimed again from
			// the start of the index: only an empty claim from the start
			// finds the queue dry.
			hinted := fromSQL.Load() != nil && (sql == *fromSQL.Load() || sql == *weightedFromSQL.Load())
			if tag.RowsAffected() == 0 && !hinted {
				select {
				case dry <- struct{}{}:
				default:
				}
			}
		}
	}, pgstore.WithListen(false), pgstore.WithJanitorInterval(time.Hour))
	strictFrom, weightedFrom := pgstore.ClaimFromSQL(s)
	weightedFromSQL.Store(&weightedFrom)
	fromSQL.Store(&strictFrom)
	bind(t, s, "dry", nil)
	if _, err := s.Add(bg, queue.Job[P]{Payload: P{N: 1}}); err != nil {
		t.Fatal(err)
	}
	j := claimWithin(t, s, 10*time.Second)
	if err := s.Complete(bg, j); err != nil {
		t.Fatal(err)
	}
	select {
	case <-dry:
	case <-time.After(10 * time.Second):
		t.Fatal("the fetcher did not claim the worker's next job")
	}
	before := claims.Load()
	// Workers coming back, one after another, to a queue that nothing has
	// refilled (the poll is a minute away).
	for range 5 {
		ctx, cancel := context.WithTimeout(bg, 20*time.Millisecond)
		_, err := s.Claim(ctx)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Claim on a dry queue = %v", err)
		}
	}
	if n := claims.Load() - before; n != 0 {
		t.Fatalf("%d claim statements by workers waiting on a queue known to be empty; want 0", n)
	}
	got := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(bg, 10*time.Second)
		defer cancel()
		_, err := s.Claim(ctx)
		got <- err
	}()
	if _, err := s.Add(bg, queue.Job[P]{Payload: P{N: 2}}); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("the job added to a dry queue did not reach the waiting worker: %v", err)
	}
}

// TestDryQueueForgetsWorkersExpectedBack: a worker whose outcome is
// written is expected back, and the fetcher claims its next job ahead;
// on a queue whose last claim found nothing, that claim is dropped, not
// kept for the next wake-up. Kept, each worker that came back to the
// empty queue counted twice at the next Add: as a Claim caller waiting,
// and as a worker expected back, so the process claimed two jobs for
// it and held one while other processes' workers waited.
func TestDryQueueForgetsWorkersExpectedBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := newStore[P](t, e, pgstore.WithPollInterval(time.Hour), pgstore.WithJanitorInterval(time.Hour))
	bind(t, s, "expected", nil)
	if _, err := s.EnqueueMany(bg, []queue.Job[P]{{Payload: P{N: 1}}, {Payload: P{N: 2}}}); err != nil {
		t.Fatal(err)
	}
	first, second := claimWithin(t, s, 10*time.Second), claimWithin(t, s, 10*time.Second)
	settled := func(what string) {
		t.Helper()
		require.Eventually(t, func() bool { return pgstore.AheadClaimed(s) }, 10*time.Second, time.Millisecond, what)
	}
	// The first completion's claim ahead finds the queue empty.
	require.NoError(t, s.Complete(bg, first))
	settled("the claim for the first worker expected back")
	// The second comes to a queue known to be dry: nothing is claimed
	// for it, and nothing is left owed to it.
	require.NoError(t, s.Complete(bg, second))
	settled("the second worker expected back, on a dry queue, forgotten")
	added, err := s.EnqueueMany(bg, []queue.Job[P]{{Payload: P{N: 3}}, {Payload: P{N: 4}}, {Payload: P{N: 5}}})
	require.NoError(t, err)
	j := claimWithin(t, s, 10*time.Second)
	require.Equal(t, added[0].ID, j.ID)
	settled("the claim for the worker that came back")
	table := jobsTable(e)
	require.Equal(t, 1, count(t, e.pool, "SELECT count(*) FROM "+table+" WHERE queue = 'expected' AND state = 'running'"),
		"jobs claimed by a process with one worker running and none waiting")
	require.NoError(t, s.Complete(bg, j))
}

// TestWakeUpsDoNotRecount: Len's count of the available jobs (up to twice
// the capacity: an index walk of thousands of entries) is refreshed every
// poll interval, as documented, not on every promoter wake-up; a process
// woken by each notification of a busy producer recounted hundreds of
// times a second.
func TestWakeUpsDoNotRecount(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var counts atomic.Int64
	stepped := make(chan struct{}, 1)
	s := tracedStore(t, e, func(sql string, _ bool, _ pgconn.CommandTag, err error) {
		if err != nil {
			return
		}
		if strings.Contains(sql, "LIMIT $2::bigint) c") {
			counts.Add(1)
		}
		if strings.Contains(sql, "SELECT (SELECT run_at FROM") {
			select {
			case stepped <- struct{}{}:
			default:
			}
		}
	})
	bind(t, s, "recount", nil)
	queuetest.Await(t, stepped, 10*time.Second, "the promoter's first step")
	before := counts.Load()
	// Each scheduled Add wakes the promoter, which looks for the next due
	// time; wait for that look before the next Add.
	for i := range 20 {
		select { // a stale signal
		case <-stepped:
		default:
		}
		if _, err := s.Add(bg, queue.Job[P]{Payload: P{N: i}, RunAt: time.Now().Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		queuetest.Await(t, stepped, 10*time.Second, "the promoter to wake")
	}
	if n := counts.Load() - before; n > 1 {
		t.Fatalf("%d recounts of the available jobs in 20 wake-ups within one poll interval", n)
	}
}

// TestConcurrentRescueOnce: every process rescues expired leases, so
// rescues run at once; each expired job is rescued exactly once (one
// event, one entry in its error history), whichever process does it.
func TestConcurrentRescueOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n = 300
	clk := queuetest.NewFakeClock(epoch)
	stores := make([]*pgstore.Store[P], 3)
	logs := make([]*storetest.EventLog, len(stores))
	for i := range stores {
		// The test calls RescueExpired itself: the loop stays out of its way.
		stores[i] = newStore[P](t, e, pgstore.WithWorkerID(fmt.Sprint("rescuer-", i)), pgstore.WithJanitorInterval(time.Hour))
		logs[i] = bind(t, stores[i], "rescue-once", clk)
	}
	jobs := make([]queue.Job[P], n)
	if _, err := stores[0].EnqueueMany(bg, jobs); err != nil {
		t.Fatal(err)
	}
	// The jobs' process died mid-run: running, leases expired (leases
	// are in database time). An hour back, not a second: the fake clock
	// stands still, so each store's database time falls behind real time
	// by however long the test has run since its Init (leaseShift) —
	// more than a second on a loaded machine, and nothing looked expired.
	table := jobsTable(e)
	if _, err := e.pool.Exec(bg, "UPDATE "+table+" SET state = 'running', attempt = 1, lease_owner = 'dead', lease_expires_at = now() - interval '1 hour'"); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var rescued atomic.Int64
	for _, s := range stores {
		for range 2 { // RescueExpired serialises a store's own calls
			wg.Go(func() {
				got, err := s.RescueExpired(bg)
				if err != nil {
					t.Error(err)
				}
				rescued.Add(int64(got))
			})
		}
	}
	wg.Wait()
	events := 0
	for _, l := range logs {
		events += l.Count(queue.EventRescued)
	}
	if rescued.Load() != n || events != n {
		t.Fatalf("RescueExpired counted %d, %d EventRescued; want %d each", rescued.Load(), events, n)
	}
	if c := count(t, e.pool, "SELECT count(*) FROM "+table+" WHERE state = 'available' AND attempt = 1 AND jsonb_array_length(errors) = 1"); c != n {
		t.Fatalf("%d jobs available with one lease-expired error, want %d", c, n)
	}
}
