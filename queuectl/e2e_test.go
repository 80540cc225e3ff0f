package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/admin"
	"github.com/queuekit/queue/pgstore"
	"github.com/queuekit/queue/redisstore"
	"github.com/queuekit/queue/storekit"
)

// P is the test jobs' payload.
type P struct {
	N int `json:"n"`
}

// harness is a queue whose handler the test steers: keys it fails
// permanently, "slow" keys that run until cancelled, and what ran.
type harness struct {
	t    *testing.T
	args []string // the global flags naming the store and queue
	q    *queue.Queue[P]
	adm  *admin.Admin // over the same store, to read state between steps

	mu      sync.Mutex
	failing map[string]bool

	ran       chan string     // keys that completed
	done      map[string]bool // keys waitRan saw complete
	started   chan string     // slow keys that started
	cancelled chan string     // slow keys whose context was cancelled

	paused      atomic.Bool // the test paused the queue
	ranInPause  atomic.Value
	ranInPauseN atomic.Int32
}

func newHarness(t *testing.T, args []string, store storekit.Store[P], adm func() *admin.Admin) *harness {
	h := &harness{t: t, args: args, failing: map[string]bool{}, done: map[string]bool{},
		ran: make(chan string, 100), started: make(chan string, 10), cancelled: make(chan string, 10)}
	q, err := queue.NewWithStore(store, h.handle, queue.WithName("mail"), queue.WithWorkers(2, 2))
	require.NoError(t, err)
	h.q = q
	h.adm = adm()
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, q.Start(ctx))
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		_ = q.Shutdown(sctx)
		cancel()
	})
	return h
}

func (h *harness) handle(ctx context.Context, job queue.Job[P]) error {
	if h.paused.Load() {
		h.ranInPause.Store(job.Key)
		h.ranInPauseN.Add(1)
	}
	if strings.HasPrefix(job.Key, "slow") {
		h.started <- job.Key
		<-ctx.Done()
		h.cancelled <- job.Key
		return ctx.Err()
	}
	h.mu.Lock()
	fail := h.failing[job.Key]
	h.mu.Unlock()
	if fail {
		return queue.Permanent(errors.New("boom: " + job.Key))
	}
	h.ran <- job.Key
	return nil
}

func (h *harness) setFailing(fail bool, keys ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, k := range keys {
		h.failing[k] = fail
	}
}

// ctl runs queuectl on the harness's store and queue.
func (h *harness) ctl(stdin string, args ...string) result {
	h.t.Helper()
	return ctl(h.t, stdin, append(append([]string{}, h.args...), args...)...)
}

// ok runs queuectl and requires it to succeed.
func (h *harness) ok(args ...string) string {
	h.t.Helper()
	r := h.ctl("", args...)
	require.Equal(h.t, exitOK, r.code, "queuectl %v: %s", args, r.stderr)
	require.Empty(h.t, r.stderr)
	return r.stdout
}

func (h *harness) enqueue(key, target string, n int, in time.Duration) {
	h.t.Helper()
	job := queue.Job[P]{Key: key, Target: target, Payload: P{N: n}}
	if in > 0 {
		require.NoError(h.t, h.q.EnqueueIn(context.Background(), job, in))
		return
	}
	require.NoError(h.t, h.q.Enqueue(context.Background(), job))
}

// job returns the job holding key, through queuectl show --key -o json.
func (h *harness) job(key string) jobView {
	h.t.Helper()
	var v jobView
	require.NoError(h.t, json.Unmarshal([]byte(h.ok("show", "--key", key, "-o", "json", "--payload")), &v))
	return v
}

// waitState waits for the job with key to be in state s (the store is a
// real server: its writes land on their own time).
func (h *harness) waitState(key string, s admin.State) admin.JobInfo {
	h.t.Helper()
	var j admin.JobInfo
	require.Eventually(h.t, func() bool {
		var err error
		j, err = h.adm.GetKey(context.Background(), key, false)
		return err == nil && j.State == s
	}, 15*time.Second, 10*time.Millisecond, "job %q never %s (last: %+v)", key, s, j)
	return j
}

// waitGone waits until the store no longer holds the job with key (a
// store that keeps no ended jobs).
func (h *harness) waitGone(key string) {
	h.t.Helper()
	require.Eventually(h.t, func() bool {
		_, err := h.adm.GetKey(context.Background(), key, false)
		return errors.Is(err, admin.ErrNotFound)
	}, 15*time.Second, 10*time.Millisecond, "job %q still held", key)
}

// waitRan waits for the handler to complete the job with key.
func (h *harness) waitRan(key string) {
	h.t.Helper()
	timeout := time.After(15 * time.Second)
	for !h.done[key] {
		select {
		case k := <-h.ran:
			h.done[k] = true
		case <-timeout:
			h.t.Fatalf("job %q did not run", key)
		}
	}
	delete(h.done, key)
}

func (h *harness) ls(args ...string) pageJSON {
	h.t.Helper()
	var p pageJSON
	out := h.ok(append([]string{"ls", "-o", "json"}, args...)...)
	require.NoError(h.t, json.Unmarshal([]byte(out), &p), out)
	return p
}

func keys(p pageJSON) []string {
	var out []string
	for _, j := range p.Jobs {
		out = append(out, j.Key)
	}
	return out
}

// exercise drives every queuectl command against h's queue. ended says
// whether the store keeps done and cancelled jobs (pgstore, within its
// retention; redisstore does not: such a job is no longer found).
func exercise(t *testing.T, h *harness, ended bool) {
	id := func(key string) string { return strconv.FormatInt(h.job(key).ID, 10) }

	// Dead jobs: three fail permanently.
	h.setFailing(true, "bad-1", "bad-2", "bad-3")
	h.enqueue("bad-1", "t1", 1, 0)
	h.waitState("bad-1", admin.Dead)
	h.enqueue("bad-2", "t1", 2, 0)
	h.waitState("bad-2", admin.Dead)
	h.enqueue("bad-3", "t2", 3, 0)
	h.waitState("bad-3", admin.Dead)

	t.Run("ls", func(t *testing.T) {
		require.Equal(t, []string{"bad-3", "bad-2", "bad-1"}, keys(h.ls("--state", "dead")))
		require.Equal(t, []string{"bad-1", "bad-2", "bad-3"}, keys(h.ls("--state", "dead", "--oldest")))
		require.Equal(t, []string{"bad-2", "bad-1"}, keys(h.ls("--state", "dead", "--target", "t1")))
		require.Equal(t, []string{"bad-3"}, keys(h.ls("--state", "dead", "--key-prefix", "bad-3")))
		require.Empty(t, keys(h.ls("--state", "dead", "--priority", "high")))
		require.Len(t, keys(h.ls("--state", "dead", "--priority", "normal")), 3)

		// Paging, a job at a time, in JSON and in the table.
		var got []string
		p := h.ls("--state", "dead", "--oldest", "--limit", "1")
		for {
			got = append(got, keys(p)...)
			if p.Next == "" {
				break
			}
			p = h.ls("--state", "dead", "--oldest", "--limit", "1", "--after", p.Next)
		}
		require.Equal(t, []string{"bad-1", "bad-2", "bad-3"}, got)
		out := h.ok("ls", "--state", "dead", "--limit", "2")
		require.Contains(t, out, "LAST ERROR")
		require.Contains(t, out, "boom: bad-3")
		require.Contains(t, out, "next page: --after ")
		require.NotContains(t, h.ok("ls", "--state", "dead", "--limit", "3"), "next page")

		// A cursor from another state is refused, naming the mistake.
		r := h.ctl("", "ls", "--state", "done", "--after", p0(h).Next)
		require.Equal(t, exitUsage, r.code, r.stderr)
		require.Contains(t, r.stderr, "made for state dead")
	})

	t.Run("show", func(t *testing.T) {
		j := h.job("bad-2")
		require.Equal(t, admin.Dead, j.State)
		require.JSONEq(t, `{"n":2}`, string(j.Payload))
		out := h.ok("show", id("bad-2"))
		require.Contains(t, out, "state       dead")
		require.Contains(t, out, "last error  permanent: boom: bad-2")
		require.NotContains(t, out, "payload")
		require.Contains(t, h.ok("show", id("bad-2"), "--payload"), `{"n":2}`)

		r := h.ctl("", "show", "999999999")
		require.Equal(t, exitError, r.code)
		require.Equal(t, "queuectl: show: job 999999999 not found in queue \"mail\"\n", r.stderr)
		r = h.ctl("", "show", "--key", "nope")
		require.Equal(t, exitError, r.code)
		require.Equal(t, "queuectl: show: no job with key \"nope\" in queue \"mail\"\n", r.stderr)
	})

	t.Run("retry", func(t *testing.T) {
		h.setFailing(false, "bad-1", "bad-2", "bad-3")
		bad1 := id("bad-1")
		require.Contains(t, h.ok("retry", bad1), "is ready to run again")
		h.waitRan("bad-1")

		// Not dead any more: refused (done, or gone where the store
		// keeps no done jobs).
		r := h.ctl("", "retry", bad1)
		require.Equal(t, exitError, r.code)
		if ended {
			require.Contains(t, r.stderr, "retry: job "+bad1+": ")
			require.Contains(t, r.stderr, "not in a state that allows this")
		} else {
			require.Equal(t, "queuectl: retry: job "+bad1+" not found in queue \"mail\"\n", r.stderr)
		}

		// By filter: target t1 holds one dead job now.
		require.Contains(t, h.ok("retry", "--state", "dead", "--target", "t1", "--yes"), "1 jobs ready to run again")
		h.waitRan("bad-2")
		require.Equal(t, []string{"bad-3"}, keys(h.ls("--state", "dead")))
	})

	t.Run("rm", func(t *testing.T) {
		bad3 := id("bad-3")
		require.Equal(t, "job "+bad3+" deleted\n", h.ok("rm", bad3))
		r := h.ctl("", "rm", bad3)
		require.Equal(t, exitError, r.code)
		require.Equal(t, "queuectl: rm: job "+bad3+" not found in queue \"mail\"\n", r.stderr)
	})

	t.Run("cancel", func(t *testing.T) {
		h.enqueue("later", "", 4, time.Hour)
		require.Equal(t, admin.Scheduled, h.job("later").State)
		later := id("later")
		require.Equal(t, "job "+later+" cancelled\n", h.ok("cancel", later))
		r := h.ctl("", "cancel", later)
		require.Equal(t, exitError, r.code)
		if ended {
			require.Equal(t, admin.Cancelled, h.job("later").State)
			require.Contains(t, r.stderr, "cancel: job "+later+": ")
		} else {
			require.Equal(t, "queuectl: cancel: job "+later+" not found in queue \"mail\"\n", r.stderr)
			r = h.ctl("", "show", "--key", "later")
			require.Equal(t, "queuectl: show: no job with key \"later\" in queue \"mail\"\n", r.stderr)
		}

		// A running job: its context is cancelled where it runs.
		h.enqueue("slow-1", "", 5, 0)
		require.Equal(t, "slow-1", <-h.started)
		slow := id("slow-1")
		require.Contains(t, h.ok("cancel", slow), "job "+slow+" is running: its context is cancelled")
		select {
		case k := <-h.cancelled:
			require.Equal(t, "slow-1", k)
		case <-time.After(15 * time.Second):
			t.Fatal("the running job's context was not cancelled")
		}
		if ended {
			h.waitState("slow-1", admin.Cancelled)
		} else {
			h.waitGone("slow-1")
		}
	})

	t.Run("pause", func(t *testing.T) {
		require.Contains(t, h.ok("pause"), `queue "mail" paused`)
		h.paused.Store(true)
		require.Contains(t, h.ok("stats"), "PAUSED")
		h.enqueue("p-1", "", 6, 0)
		require.Equal(t, []string{"p-1"}, keys(h.ls("--state", "ready")))
		h.paused.Store(false)
		require.Contains(t, h.ok("resume"), `queue "mail" resumed`)
		h.waitRan("p-1")
		require.Zero(t, h.ranInPauseN.Load(), "a job ran while the queue was paused: %v", h.ranInPause.Load())
	})

	t.Run("stats", func(t *testing.T) {
		var st statsReport
		require.NoError(t, json.Unmarshal([]byte(h.ok("stats", "-o", "json")), &st))
		require.False(t, st.Paused)
		require.Equal(t, "mail", st.Queue)
		require.Equal(t, 0, st.Counts[admin.Dead])
		if ended {
			require.Equal(t, 2, st.Counts[admin.Cancelled])
		} else {
			require.Zero(t, st.Counts[admin.Cancelled])
		}
		require.Equal(t, 0, st.Counts[admin.Ready])
		out := h.ok("stats")
		require.Contains(t, out, `queue "mail" on `)
		require.Contains(t, out, "high 0, normal 0, low 0")
		if ended {
			require.NotContains(t, out, "not kept")
			require.Empty(t, st.NotKept)
		} else {
			require.Equal(t, []admin.State{admin.Done, admin.Cancelled}, st.NotKept)
			require.NotContains(t, st.Counts, admin.Done, "-o json leaves out what Redis does not keep") // Redis keeps no done or cancelled jobs: no count to show
			require.Regexp(t, `(?m)^  done +not kept$`, out)
			require.Regexp(t, `(?m)^  cancelled +not kept$`, out)
		}
	})
}

// p0 is the first page of the dead jobs, one job long: its cursor.
func p0(h *harness) pageJSON { return h.ls("--state", "dead", "--limit", "1") }

// TestPG drives queuectl against a queue running on PostgreSQL.
func TestPG(t *testing.T) {
	t.Parallel()
	h := newPGHarness(t, pgstore.WithLeaseTTL(300*time.Millisecond), pgstore.WithPollInterval(50*time.Millisecond))
	exercise(t, h, true)
}

// newPGHarness runs queue "mail" on a pgstore with opts in a fresh,
// migrated schema.
func newPGHarness(t *testing.T, opts ...pgstore.Option) *harness {
	pool := newPool(t)
	schema := freshSchema(t, pool)
	require.NoError(t, pgstore.Migrate(context.Background(), pool, pgstore.WithSchema(schema)))
	store, err := pgstore.New[P](pool, append([]pgstore.Option{pgstore.WithSchema(schema)}, opts...)...)
	require.NoError(t, err)
	return newHarness(t, []string{"--pg", pgURL(), "--schema", schema, "--queue", "mail"}, store,
		func() *admin.Admin { return admin.New(store.Admin()) })
}

// TestPGTargets drives queuectl targets against a queue running on
// PostgreSQL.
func TestPGTargets(t *testing.T) {
	t.Parallel()
	h := newPGHarness(t)
	exerciseTargets(t, h, true)
}

// TestRetryConfirm: a filter retry on a terminal asks first, and does
// nothing unless the answer is yes.
func TestRetryConfirm(t *testing.T) {
	h := newPGHarness(t)
	h.setFailing(true, "c-1", "c-2")
	h.enqueue("c-1", "x", 1, 0)
	h.enqueue("c-2", "x", 2, 0)
	h.waitState("c-1", admin.Dead)
	h.waitState("c-2", admin.Dead)
	h.setFailing(false, "c-1", "c-2")

	defer func(old func(io.Reader) bool) { terminal = old }(terminal)
	terminal = func(io.Reader) bool { return true }
	r := h.ctl("n\n", "retry", "--state", "dead", "--target", "x")
	require.Equal(t, exitError, r.code)
	require.Equal(t, `retry 2 dead jobs (target x) of queue "mail"? [y/N] `, r.stdout)
	require.Equal(t, "queuectl: retry: not confirmed; nothing retried\n", r.stderr)
	require.Len(t, keys(h.ls("--state", "dead")), 2)

	r = h.ctl("y\n", "retry", "--state", "dead", "--target", "x")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, fmt.Sprintf("retry 2 dead jobs (target x) of queue \"mail\"? [y/N] %d jobs ready to run again\n", 2), r.stdout)
	h.waitRan("c-1")
	h.waitRan("c-2")
}

// TestRedis drives queuectl against a queue running on Redis.
func TestRedis(t *testing.T) {
	t.Parallel()
	client, prefix := newRedis(t)
	store, err := redisstore.New[P](client, redisstore.WithPrefix(prefix), redisstore.WithLeaseTTL(300*time.Millisecond),
		redisstore.WithPollInterval(50*time.Millisecond))
	require.NoError(t, err)
	h := newHarness(t, []string{"--redis", redisAddr(), "--prefix", prefix, "--queue", "mail"}, store,
		func() *admin.Admin { return adminOf(store) })
	exercise(t, h, false)
}

// TestRedisTargets drives queuectl targets against a queue running on
// Redis.
func TestRedisTargets(t *testing.T) {
	t.Parallel()
	client, prefix := newRedis(t)
	store, err := redisstore.New[P](client, redisstore.WithPrefix(prefix))
	require.NoError(t, err)
	h := newHarness(t, []string{"--redis", redisAddr(), "--prefix", prefix, "--queue", "mail"}, store,
		func() *admin.Admin { return adminOf(store) })
	exerciseTargets(t, h, false)
}

// targetsJSON runs queuectl targets -o json.
func (h *harness) targetsJSON() []admin.TargetInfo {
	h.t.Helper()
	var ts []admin.TargetInfo
	out := h.ok("targets", "-o", "json")
	require.NoError(h.t, json.Unmarshal([]byte(out), &ts), out)
	return ts
}

// awaitTarget waits until the running queue's own view of target name
// satisfies cond: queuectl's change reaches it through the store's
// announcement, or its reload once a second.
func (h *harness) awaitTarget(name, what string, cond func(st queue.TargetStatus) bool) {
	h.t.Helper()
	var st queue.TargetStatus
	require.Eventually(h.t, func() bool {
		st, _ = h.q.Target(name)
		return cond(st)
	}, 15*time.Second, 5*time.Millisecond, "the running queue never saw target %q %s (last: %+v)", name, what, st)
}

// exerciseTargets drives queuectl targets against h's running queue: each
// action as listed by queuectl and as the queue applies it, and a change
// the queue makes as queuectl lists it. ended says whether the store
// keeps cancelled jobs (as for exercise).
func exerciseTargets(t *testing.T, h *harness, ended bool) {
	// The queue must have had a job for queuectl to know it.
	h.enqueue("first", "", 1, 0)
	h.waitRan("first")

	require.Equal(t, "no targets to report\n", h.ok("targets"))
	require.Equal(t, "no targets to report\n", h.ok("targets", "list"))
	require.Equal(t, "[]\n", h.ok("targets", "-o", "json"))

	require.Equal(t, "target api: suspend done\n", h.ok("targets", "suspend", "api", "--for", "1h"))
	out := h.ok("targets")
	require.Regexp(t, `(?m)^TARGET +STATE +BREAKER +REASON\n`+
		`api +suspended until in (59m\d\ds|1h00m) +closed +-\n$`, out)
	h.awaitTarget("api", "suspended", func(st queue.TargetStatus) bool {
		return st.SuspendedUntil.After(time.Now().Add(59 * time.Minute))
	})

	require.Equal(t, "target api: disable done\n", h.ok("targets", "--reason", "upstream down", "disable", "api"))
	out = h.ok("targets")
	require.Regexp(t, `(?m)^api +disabled (now|\d+s ago) +closed +upstream down\n$`, out)
	h.awaitTarget("api", "disabled", func(st queue.TargetStatus) bool {
		return st.Disabled && st.Reason == "upstream down"
	})
	// A job for the disabled target is cancelled, not run.
	h.enqueue("to-api", "api", 2, 0)
	if ended {
		h.waitState("to-api", admin.Cancelled)
	} else {
		h.waitGone("to-api")
	}

	ts := h.targetsJSON()
	require.Len(t, ts, 1)
	require.Equal(t, "api", ts[0].Name)
	require.True(t, ts[0].Disabled)
	require.Equal(t, "upstream down", ts[0].Reason)
	require.False(t, ts[0].DisabledAt.IsZero())
	require.True(t, ts[0].SuspendedUntil.After(time.Now()), "disable keeps the suspension")
	require.Equal(t, "closed", ts[0].Breaker)

	require.Equal(t, "target api: resume done\n", h.ok("targets", "resume", "api"))
	ts = h.targetsJSON()
	require.Len(t, ts, 1)
	require.True(t, ts[0].Disabled, "resume leaves the target disabled")
	require.Zero(t, ts[0].SuspendedUntil)
	h.awaitTarget("api", "resumed, still disabled", func(st queue.TargetStatus) bool {
		return st.Disabled && st.SuspendedUntil.IsZero()
	})

	require.Equal(t, "target api: enable done\n", h.ok("targets", "enable", "api"))
	require.Equal(t, "no targets to report\n", h.ok("targets"))
	h.awaitTarget("api", "enabled", func(st queue.TargetStatus) bool { return !st.Disabled && st.SuspendedUntil.IsZero() })
	h.enqueue("to-api-2", "api", 3, 0)
	h.waitRan("to-api-2")

	// --for defaults to 5 minutes.
	h.ok("targets", "suspend", "slowpoke")
	ts = h.targetsJSON()
	require.Len(t, ts, 1)
	left := time.Until(ts[0].SuspendedUntil)
	require.True(t, left > 4*time.Minute && left <= 5*time.Minute, "suspended for %s", left)
	h.ok("targets", "resume", "slowpoke")

	// What the queue does, queuectl lists.
	require.NoError(t, h.q.Disable("from-queue", errors.New("by the engine")))
	require.Eventually(t, func() bool {
		ts := h.targetsJSON()
		return len(ts) == 1 && ts[0].Name == "from-queue" && ts[0].Reason == "by the engine"
	}, 15*time.Second, 10*time.Millisecond, "queuectl never listed the queue's disabling")

	r := h.ctl("", "targets", "disable", "bad\x00name")
	require.Equal(t, exitError, r.code)
	require.Contains(t, r.stderr, "NUL byte")
}
