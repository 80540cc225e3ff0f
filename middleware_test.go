package queue_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/internal/memstore"
	"github.com/queuekit/queue/queuetype"
	"github.com/queuekit/queue/storekit"
)

type ctxKey string

// infoLog keeps copies of the JobInfo a middleware saw after its next
// returned.
type infoLog struct {
	mu    sync.Mutex
	infos []queue.JobInfo
}

func (l *infoLog) mw(ctx context.Context, job *queue.JobInfo, next func(context.Context)) {
	next(ctx)
	l.mu.Lock()
	c := *job
	c.LogAttrs = nil
	l.infos = append(l.infos, c)
	l.mu.Unlock()
}

func (l *infoLog) all() []queue.JobInfo {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]queue.JobInfo(nil), l.infos...)
}

func TestMiddlewareOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var (
			mu    sync.Mutex
			trace []string
		)
		note := func(s string) {
			mu.Lock()
			trace = append(trace, s)
			mu.Unlock()
		}
		wrap := func(name string) queue.Middleware {
			return func(ctx context.Context, job *queue.JobInfo, next func(context.Context)) {
				_, hasDeadline := ctx.Deadline()
				note(name + " in, deadline " + map[bool]string{true: "yes", false: "no"}[hasDeadline])
				next(context.WithValue(ctx, ctxKey(name), name))
				note(name + " out, " + job.Outcome.String())
			}
		}
		h := func(ctx context.Context, j queue.Job[string]) error {
			_, hasDeadline := ctx.Deadline()
			note("handler " + ctx.Value(ctxKey("a")).(string) + ctx.Value(ctxKey("b")).(string) + ctx.Value(ctxKey("c")).(string) +
				", deadline " + map[bool]string{true: "yes", false: "no"}[hasDeadline])
			return nil
		}
		q := newQueue(t, h, queue.WithWorkers(1, 1), queue.WithJobTimeout(time.Minute),
			queue.WithMiddleware(wrap("a"), wrap("b")), queue.WithMiddleware(wrap("c")))
		require.NoError(t, q.Enqueue(bg, queue.Job[string]{Payload: "x"}))
		require.NoError(t, q.Start(bg))
		require.NoError(t, q.Stop(bg))
		assert.Equal(t, []string{
			"a in, deadline no", "b in, deadline no", "c in, deadline no",
			"handler abc, deadline yes",
			"c out, done", "b out, done", "a out, done",
		}, trace)
	})
}

func TestMiddlewareOutcomes(t *testing.T) {
	errBoom := errors.New("boom")
	for _, tc := range []struct {
		name    string
		ret     func() error
		max     int
		outcome queue.EventKind
		retryIn time.Duration // 0: any positive delay when retried
		errIs   error
	}{
		{name: "done", ret: func() error { return nil }, outcome: queue.EventDone},
		{name: "retry", ret: func() error { return errBoom }, max: 3, outcome: queue.EventRetried, errIs: errBoom},
		{name: "retry-after", ret: func() error { return queue.RetryAfter(7*time.Second, errBoom) }, outcome: queue.EventRetried, retryIn: 7 * time.Second, errIs: errBoom},
		{name: "retry-after-past-ceiling", ret: func() error { return queue.RetryAfter(time.Hour, nil) }, outcome: queue.EventDone},
		{name: "dead-last-attempt", ret: func() error { return errBoom }, max: 1, outcome: queue.EventDead, errIs: errBoom},
		{name: "dead-permanent", ret: func() error { return queue.Permanent(errBoom) }, max: 5, outcome: queue.EventDead, errIs: errBoom},
		{name: "panic", ret: func() error { panic("oops") }, max: 1, outcome: queue.EventDead},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var infos infoLog
				var events eventLog
				h := func(ctx context.Context, j queue.Job[string]) error { return tc.ret() }
				q := newQueue(t, h, queue.WithWorkers(1, 1), queue.WithMiddleware(infos.mw), queue.WithObserver(events.add),
					queue.WithName("jobs"), queue.WithRetry(4, time.Second, time.Second))
				require.NoError(t, q.Enqueue(bg, queue.Job[string]{Key: "k", Target: "t", Group: "g", MaxAttempts: tc.max,
					Meta: queuetype.MetaOf(map[string]string{"tenant": "acme"}), Payload: "x"}))
				require.NoError(t, q.Start(bg))
				require.NoError(t, q.Stop(bg))
				got := infos.all()
				require.Len(t, got, 1)
				info := got[0]
				assert.Equal(t, "jobs", info.Queue)
				assert.NotZero(t, info.ID)
				assert.Equal(t, "k", info.Key)
				assert.Equal(t, "t", info.Target)
				assert.Equal(t, "g", info.Group)
				assert.Equal(t, "normal", info.Priority)
				assert.Equal(t, 1, info.Attempt)
				wantMax := tc.max
				if wantMax == 0 {
					wantMax = 4
				}
				assert.Equal(t, wantMax, info.MaxAttempts)
				assert.Equal(t, "acme", info.Meta.Get("tenant"))
				assert.Equal(t, tc.outcome, info.Outcome)
				switch {
				case tc.outcome != queue.EventRetried:
					assert.Zero(t, info.RetryIn)
				case tc.retryIn != 0:
					assert.Equal(t, tc.retryIn, info.RetryIn)
				default:
					assert.Positive(t, info.RetryIn)
				}
				if tc.errIs != nil {
					assert.ErrorIs(t, info.Err, tc.errIs)
				}
				if tc.name == "panic" {
					var pe *queue.PanicError
					assert.ErrorAs(t, info.Err, &pe)
				}
				if tc.outcome == queue.EventDone && tc.name == "done" {
					assert.NoError(t, info.Err)
				}
				// What the middleware was told is what the queue recorded.
				_, ok := events.find(tc.outcome, "k")
				assert.True(t, ok, "event %s", tc.outcome)
			})
		})
	}
}

func TestMiddlewareShutdownAndCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var infos infoLog
		running := make(chan int64, 2)
		h := func(ctx context.Context, j queue.Job[string]) error {
			running <- j.ID
			<-ctx.Done()
			return ctx.Err()
		}
		q := newQueue(t, h, queue.WithWorkers(1, 1), queue.WithMiddleware(infos.mw))
		adm := q.Admin()
		require.NoError(t, q.Start(bg))
		require.NoError(t, q.Enqueue(bg, queue.Job[string]{Key: "cancel-me", Payload: "x"}))
		id := <-running
		require.NoError(t, adm.Cancel(bg, id))
		synctest.Wait()
		require.NoError(t, q.Enqueue(bg, queue.Job[string]{Key: "interrupt-me", Payload: "x"}))
		<-running
		require.NoError(t, q.Shutdown(bg))
		got := infos.all()
		require.Len(t, got, 2)
		assert.Equal(t, queue.EventCancelled, got[0].Outcome)
		assert.ErrorIs(t, got[0].Err, context.Canceled)
		assert.Equal(t, queue.EventDeferred, got[1].Outcome)
		c := q.Stats().Counts
		assert.Equal(t, uint64(1), c.Cancelled)
		assert.Equal(t, uint64(1), c.Deferred)
	})
}

func skipNext(ctx context.Context, job *queue.JobInfo, next func(context.Context)) {}

func TestMiddlewareWithoutNext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var (
			infos infoLog
			runs  int
			dead  error
		)
		h := func(ctx context.Context, j queue.Job[string]) error { runs++; return nil }
		q := newQueue(t, h, queue.WithWorkers(1, 1), queue.WithMiddleware(infos.mw, skipNext))
		q.OnDead(func(ctx context.Context, j queue.Job[string], err error) { dead = err })
		require.NoError(t, q.Enqueue(bg, queue.Job[string]{MaxAttempts: 1, Payload: "x"}))
		require.NoError(t, q.Start(bg))
		require.NoError(t, q.Stop(bg))
		assert.Zero(t, runs, "the handler must not run")
		require.Error(t, dead)
		assert.Contains(t, dead.Error(), "middleware 1 (github.com/queuekit/queue_test.skipNext) returned without calling next")
		got := infos.all()
		require.Len(t, got, 1)
		assert.Equal(t, queue.EventDead, got[0].Outcome)
		assert.Equal(t, dead, got[0].Err)
	})
}

func TestMiddlewareCallsNextTwice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var runs int
		twice := func(ctx context.Context, job *queue.JobInfo, next func(context.Context)) { next(ctx); next(ctx) }
		h := func(ctx context.Context, j queue.Job[string]) error { runs++; return nil }
		q := newQueue(t, h, queue.WithWorkers(1, 1), queue.WithMiddleware(twice))
		require.NoError(t, q.Enqueue(bg, queue.Job[string]{Payload: "x"}))
		require.NoError(t, q.Start(bg))
		require.NoError(t, q.Stop(bg))
		assert.Equal(t, 1, runs)
		assert.Equal(t, uint64(1), q.Stats().Counts.Done)
	})
}

func TestMiddlewarePanic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var runs int
		var dead error
		before := func(ctx context.Context, job *queue.JobInfo, next func(context.Context)) {
			if job.Key == "before" {
				panic("before next")
			}
			next(ctx)
			if job.Key == "after" {
				panic("after next")
			}
		}
		h := func(ctx context.Context, j queue.Job[string]) error { runs++; return nil }
		q := newQueue(t, h, queue.WithWorkers(1, 1), queue.WithMiddleware(before))
		q.OnDead(func(ctx context.Context, j queue.Job[string], err error) { dead = err })
		require.NoError(t, q.Enqueue(bg, queue.Job[string]{Key: "before", MaxAttempts: 1, Payload: "x"}))
		require.NoError(t, q.Enqueue(bg, queue.Job[string]{Key: "after", MaxAttempts: 1, Payload: "x"}))
		require.NoError(t, q.Start(bg))
		require.NoError(t, q.Stop(bg))
		assert.Equal(t, 1, runs, "only the job whose middleware called next ran")
		var pe *queue.PanicError
		require.ErrorAs(t, dead, &pe)
		assert.Equal(t, "before next", pe.Value)
		c := q.Stats().Counts
		assert.Equal(t, uint64(1), c.Done, "a panic after next leaves the outcome as it was")
		assert.Equal(t, uint64(1), c.Dead)
		assert.Equal(t, uint64(1), c.Panics)
	})
}

func TestEnqueueHook(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var (
			seen []queue.JobInfo
			got  []queue.Meta
			keys []string
		)
		hook := func(ctx context.Context, job *queue.JobInfo) error {
			if v, _ := ctx.Value(ctxKey("req")).(string); v != "" {
				job.Meta.Set("request_id", v)
			}
			job.Key = "ignored" // changes to other fields are ignored
			seen = append(seen, *job)
			return nil
		}
		second := func(ctx context.Context, job *queue.JobInfo) error {
			if job.Meta.Get("request_id") == "r2" { // sees the first hook's Meta
				return errors.New("tenant over quota")
			}
			return nil
		}
		h := func(ctx context.Context, j queue.Job[string]) error {
			got, keys = append(got, j.Meta), append(keys, j.Key)
			return nil
		}
		q := newQueue(t, h, queue.WithWorkers(1, 1), queue.WithName("jobs"), queue.WithRetry(3, time.Second, time.Second),
			queue.WithEnqueueHook(hook), queue.WithEnqueueHook(second))
		ctx := context.WithValue(bg, ctxKey("req"), "r1")
		require.NoError(t, q.Enqueue(ctx, queue.Job[string]{Key: "k", Priority: "high", Meta: queuetype.MetaOf(map[string]string{"a": "b"}), Payload: "x"}))
		err := q.EnqueueIn(context.WithValue(bg, ctxKey("req"), "r2"), queue.Job[string]{Key: "k2", Payload: "x"}, time.Minute)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "tenant over quota")
		assert.Contains(t, err.Error(), "enqueue hook 1")
		// A hook's refusal stores nothing.
		assert.Equal(t, uint64(1), q.Stats().Counts.Enqueued)
		require.NoError(t, q.Start(bg))
		require.NoError(t, q.Stop(bg))
		require.Len(t, seen, 2)
		assert.Equal(t, queue.JobInfo{Queue: "jobs", Key: "ignored", Priority: "high", MaxAttempts: 3,
			Meta: queuetype.MetaOf(map[string]string{"a": "b", "request_id": "r1"})}, seen[0])
		assert.Equal(t, "normal", seen[1].Priority)
		assert.False(t, seen[1].RunAt.IsZero(), "EnqueueIn's RunAt")
		require.Len(t, got, 1)
		assert.Equal(t, queuetype.MetaOf(map[string]string{"a": "b", "request_id": "r1"}), got[0])
		assert.Equal(t, []string{"k"}, keys, "the hook's change of Key is ignored")
	})
}

func TestEnqueueHookPanicAndInvalid(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := func(ctx context.Context, j queue.Job[string]) error { return nil }
		q := newQueue(t, h, queue.WithEnqueueHook(func(ctx context.Context, job *queue.JobInfo) error { panic("hook bug") }))
		err := q.Enqueue(bg, queue.Job[string]{Payload: "x"})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "enqueue hook panicked: hook bug")
		assert.Zero(t, q.Stats().Counts.Enqueued)
	})
	_, err := queue.New(func(ctx context.Context, j queue.Job[string]) error { return nil }, queue.WithMiddleware(nil))
	var oe *queue.OptionError
	require.ErrorAs(t, err, &oe)
	assert.Contains(t, err.Error(), "WithMiddleware")
	_, err = queue.New(func(ctx context.Context, j queue.Job[string]) error { return nil }, queue.WithEnqueueHook(nil))
	require.ErrorAs(t, err, &oe)
	assert.Contains(t, err.Error(), "WithEnqueueHook")
}

func TestLogger(t *testing.T) {
	assert.Same(t, slog.Default(), queue.Logger(bg), "outside a run")
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		base := slog.New(slog.NewJSONHandler(&buf, nil))
		addTrace := func(ctx context.Context, job *queue.JobInfo, next func(context.Context)) {
			job.LogAttrs = append(job.LogAttrs, slog.String("trace_id", "t-1"))
			next(ctx)
		}
		h := func(ctx context.Context, j queue.Job[string]) error {
			queue.Logger(ctx).Info("working")
			return nil
		}
		q := newQueue(t, h, queue.WithWorkers(1, 1), queue.WithName("jobs"), queue.WithLogger(base), queue.WithMiddleware(addTrace))
		require.NoError(t, q.Enqueue(bg, queue.Job[string]{Key: "k", Target: "tr", Payload: "x"}))
		require.NoError(t, q.Enqueue(bg, queue.Job[string]{Payload: "y"}))
		require.NoError(t, q.Start(bg))
		require.NoError(t, q.Stop(bg))
		var lines []map[string]any
		for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			var m map[string]any
			require.NoError(t, json.Unmarshal([]byte(l), &m))
			if m["msg"] == "working" {
				delete(m, "time")
				lines = append(lines, m)
			}
		}
		require.Len(t, lines, 2)
		assert.Equal(t, map[string]any{"level": "INFO", "msg": "working", "queue": "jobs", "job_id": float64(1), "key": "k",
			"attempt": float64(1), "target": "tr", "trace_id": "t-1"}, lines[0])
		assert.Equal(t, map[string]any{"level": "INFO", "msg": "working", "queue": "jobs", "job_id": float64(2),
			"attempt": float64(1), "trace_id": "t-1"}, lines[1], "one trace_id: the attributes of the last run are gone")
	})
}

func TestLoggerWithoutMiddleware(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		base := slog.New(slog.NewTextHandler(&buf, nil))
		h := func(ctx context.Context, j queue.Job[string]) error {
			queue.Logger(ctx).Info("working")
			return nil
		}
		q := newQueue(t, h, queue.WithWorkers(1, 1), queue.WithLogger(base), queue.WithJobTimeout(time.Minute))
		q.Admin() // the admin API's tracked runs keep the slot
		require.NoError(t, q.Enqueue(bg, queue.Job[string]{Key: "k", Payload: "x"}))
		require.NoError(t, q.Start(bg))
		require.NoError(t, q.Stop(bg))
		assert.Contains(t, buf.String(), `msg=working queue=default job_id=1 key=k attempt=1`)
	})
}

// hookStore records the Config its queue gives it.
type hookStore struct {
	*memstore.Store[string]
	cfg *storekit.Config
}

func (s hookStore) Init(cfg storekit.Config) error {
	*s.cfg = cfg
	return s.Store.Init(cfg)
}

// TestStoreEnqueueHook: a store's own enqueue paths (EnqueueMany,
// EnqueueTx) reach the WithEnqueueHook hooks through
// storekit.Config.EnqueueHook, which a queue without hooks leaves nil.
// The hooks see the job as Enqueue's do (the queue's name, the default
// priority and attempt limit filled in), run in order, and leave their
// Meta in the job; a refusal or a panic is an error naming the hook.
func TestStoreEnqueueHook(t *testing.T) {
	var plain storekit.Config
	newStoreQueue(t, storekit.Store[string](hookStore{memstore.New[string](), &plain}), nopStr)
	assert.Nil(t, plain.EnqueueHook, "a queue without hooks")

	var seen []queue.JobInfo
	first := func(ctx context.Context, job *queue.JobInfo) error {
		seen = append(seen, *job)
		switch job.Key {
		case "no":
			return errors.New("over quota")
		case "panic":
			panic("boom")
		}
		job.Meta.Set("trace", "t-"+job.Key)
		return nil
	}
	second := func(ctx context.Context, job *queue.JobInfo) error {
		job.Meta.Set("saw", job.Meta.Get("trace"))
		return nil
	}
	var cfg storekit.Config
	newStoreQueue(t, storekit.Store[string](hookStore{memstore.New[string](), &cfg}), nopStr, queue.WithName("jobs"),
		queue.WithRetry(4, time.Second, time.Second), queue.WithEnqueueHook(first), queue.WithEnqueueHook(second))
	require.NotNil(t, cfg.EnqueueHook)

	job := queue.Job[string]{Key: "k", Target: "t1", Meta: queuetype.MetaOf(map[string]string{"a": "b"})}
	require.NoError(t, storekit.EnqueueHook(bg, &cfg, &job))
	assert.Equal(t, queuetype.MetaOf(map[string]string{"a": "b", "trace": "t-k", "saw": "t-k"}), job.Meta)
	require.Len(t, seen, 1)
	assert.Equal(t, queue.JobInfo{Queue: "jobs", Key: "k", Target: "t1", Priority: "normal", MaxAttempts: 4,
		Meta: queuetype.MetaOf(map[string]string{"a": "b"})}, seen[0])

	jobs := []queue.Job[string]{{Key: "x", Priority: "high", MaxAttempts: 2}, {Key: "no"}}
	_, err := storekit.EnqueueHooks(bg, &cfg, jobs)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "job 1")
	assert.Contains(t, err.Error(), "refused by enqueue hook 0: over quota")
	assert.True(t, jobs[0].Meta.IsZero(), "the caller's slice is not changed")
	assert.Equal(t, "high", seen[1].Priority)
	assert.Equal(t, 2, seen[1].MaxAttempts)

	got, err := storekit.EnqueueHooks(bg, &cfg, []queue.Job[string]{{Key: "y"}, {Key: "z"}})
	require.NoError(t, err)
	assert.Equal(t, "t-y", got[0].Meta.Get("saw"))
	assert.Equal(t, "t-z", got[1].Meta.Get("trace"))

	err = storekit.EnqueueHook(bg, &cfg, &queue.Job[string]{Key: "panic"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "enqueue hook panicked: boom")
}

func nopStr(context.Context, queue.Job[string]) error { return nil }
