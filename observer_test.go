package queue_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/queuetest"
)

// eventLog collects the events a WithObserver hook receives.
type eventLog struct {
	mu  sync.Mutex
	evs []queue.Event
}

func (l *eventLog) add(ev queue.Event) {
	l.mu.Lock()
	l.evs = append(l.evs, ev)
	l.mu.Unlock()
}

func (l *eventLog) kinds() map[queue.EventKind]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := map[queue.EventKind]int{}
	for _, ev := range l.evs {
		m[ev.Kind]++
	}
	return m
}

func (l *eventLog) find(kind queue.EventKind, key string) (queue.Event, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ev := range l.evs {
		if ev.Kind == kind && ev.Key == key {
			return ev, true
		}
	}
	return queue.Event{}, false
}

// lifecycle drives one queue through every event kind. The hook it
// installs calls back into the queue on every event (Stats) and enqueues a
// job from a done event, which must not deadlock.
func lifecycle(t *testing.T, opts ...queue.Option) (*queue.Queue[string], *eventLog) {
	t.Helper()
	var (
		q       *queue.Queue[string]
		log     eventLog
		mu      sync.Mutex
		runs    = map[string]int{}
		release = make(chan struct{})
	)
	hook := func(ev queue.Event) {
		log.add(ev)
		_ = q.Stats() // a hook may call back into the queue
		if ev.Kind == queue.EventDone && ev.Key == "ok" {
			require.NoError(t, q.Enqueue(context.Background(), queue.Job[string]{Key: "from-hook", Payload: obsMarker}))
		}
		if ev.Kind == queue.EventSuspended {
			_, _ = q.Target(ev.Target)
		}
	}
	handler := func(ctx context.Context, j queue.Job[string]) error {
		mu.Lock()
		runs[j.Key]++
		n := runs[j.Key]
		mu.Unlock()
		switch j.Key {
		case "retry":
			if n == 1 {
				return errors.New("flaky upstream")
			}
		case "dead":
			return queue.Permanent(errors.New("bad request"))
		case "429", "429-second":
			return queue.Overloaded(errors.New("HTTP 429"))
		case "403":
			return queue.Disable(errors.New("HTTP 403"))
		case "long":
			if n == 1 {
				<-release
			}
		}
		return nil
	}
	base := []queue.Option{queue.WithCapacity(4, 0), queue.WithWorkers(1, 1), queue.WithObserver(hook),
		queue.WithSuspend(time.Minute, nil), queue.WithRetry(0, time.Second, time.Second)}
	q, err := queue.New(handler, append(base, opts...)...)
	require.NoError(t, err)
	ctx := context.Background()
	job := func(key, target string) queue.Job[string] {
		return queue.Job[string]{Key: key, Target: target, Payload: obsMarker}
	}
	for _, j := range []queue.Job[string]{job("ok", ""), job("retry", ""), job("dead", ""), job("429", "t429")} {
		require.NoError(t, q.Enqueue(ctx, j))
	}
	require.ErrorIs(t, q.Enqueue(ctx, job("full", "")), queue.ErrQueueFull) // dropped
	queuetest.Start(t, q)
	queuetest.Settle()

	// t429 is suspended for a minute: a job for it waits (deferred).
	require.NoError(t, q.Enqueue(ctx, job("429-second", "t429")))
	require.NoError(t, q.Enqueue(ctx, job("403", "t403"))) // disables t403
	queuetest.Settle()
	require.NoError(t, q.Resume("t403"))

	// A key enqueued while it runs is coalesced into one more run.
	require.NoError(t, q.Enqueue(ctx, job("long", "")))
	queuetest.Settle()
	require.NoError(t, q.Enqueue(ctx, job("long", "")))
	close(release)

	// A scheduled job cancelled before its time.
	require.NoError(t, q.EnqueueIn(ctx, job("later", ""), time.Hour))
	n, err := q.Cancel(ctx, "later")
	require.NoError(t, err)
	require.Equal(t, 1, n)

	queuetest.Advance(2 * time.Minute)
	return q, &log
}

func TestObserverSeesEveryKind(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q, log := lifecycle(t)
		kinds := log.kinds()
		for _, k := range []queue.EventKind{queue.EventEnqueued, queue.EventStarted, queue.EventDone,
			queue.EventRetried, queue.EventDead, queue.EventDropped, queue.EventCancelled, queue.EventCoalesced,
			queue.EventSuspended, queue.EventDisabled, queue.EventDeferred, queue.EventResumed} {
			assert.Positive(t, kinds[k], "no %s event", k)
		}

		// Counts agree with the events.
		st := q.Stats()
		assert.EqualValues(t, st.Done, kinds[queue.EventDone])
		assert.EqualValues(t, st.Retried, kinds[queue.EventRetried])
		assert.EqualValues(t, st.Dead, kinds[queue.EventDead])
		assert.EqualValues(t, st.DroppedFull, kinds[queue.EventDropped])
		assert.EqualValues(t, st.Cancelled, kinds[queue.EventCancelled])
		assert.EqualValues(t, st.Coalesced, kinds[queue.EventCoalesced])
		assert.EqualValues(t, st.Enqueued, kinds[queue.EventEnqueued]+kinds[queue.EventCoalesced])
		assert.EqualValues(t, st.Deferred, kinds[queue.EventDeferred])
		assert.Equal(t, kinds[queue.EventStarted], kinds[queue.EventDone]+kinds[queue.EventRetried]+kinds[queue.EventDead],
			"every started run ends in done, retried or dead")

		// The job the hook enqueued ran.
		_, ok := log.find(queue.EventDone, "from-hook")
		assert.True(t, ok, "a job enqueued from a hook runs")
	})
}

func TestObserverEventFields(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		_, log := lifecycle(t)

		ev, ok := log.find(queue.EventRetried, "retry")
		require.True(t, ok)
		assert.EqualError(t, ev.Err, "flaky upstream")
		assert.Equal(t, 1, ev.Attempt)
		assert.Positive(t, ev.JobID)
		assert.Equal(t, "normal", ev.Priority)
		assert.Positive(t, ev.Delay, "retried: the wait before the next run")
		assert.True(t, ev.Time.Equal(start), "events carry the queue clock's time")

		ev, ok = log.find(queue.EventDead, "dead")
		require.True(t, ok)
		assert.ErrorContains(t, ev.Err, "bad request")

		ev, ok = log.find(queue.EventSuspended, "")
		require.True(t, ok)
		assert.Equal(t, "t429", ev.Target)
		assert.Equal(t, time.Minute, ev.Delay)

		ev, ok = log.find(queue.EventDisabled, "")
		require.True(t, ok)
		assert.Equal(t, "t403", ev.Target)
		assert.ErrorContains(t, ev.Err, "HTTP 403")

		ev, ok = log.find(queue.EventCancelled, "later")
		require.True(t, ok)

		ev, ok = log.find(queue.EventDropped, "full")
		require.True(t, ok)

		// Events never carry payloads.
		log.mu.Lock()
		defer log.mu.Unlock()
		for _, ev := range log.evs {
			assert.NotContains(t, fmt.Sprintf("%+v", ev), obsMarker)
		}
	})
}

// A hook that enqueues from a producer's Enqueue and reads Stats from a
// worker while other goroutines hammer the queue: no deadlock, no race.
func TestObserverReentrantUnderLoad(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var q *queue.Queue[int]
		var follow sync.Map
		hook := func(ev queue.Event) {
			_ = q.Stats()
			if ev.Kind == queue.EventEnqueued && strings.HasPrefix(ev.Key, "p") {
				if _, dup := follow.LoadOrStore(ev.Key, true); !dup {
					_ = q.Enqueue(context.Background(), queue.Job[int]{Key: "f" + ev.Key[1:]})
				}
			}
		}
		q, err := queue.New(func(context.Context, queue.Job[int]) error { return nil },
			queue.WithWorkers(4, 4), queue.WithCapacity(1000, 0), queue.WithObserver(hook))
		require.NoError(t, err)
		queuetest.Start(t, q)
		var wg sync.WaitGroup
		for p := range 4 {
			wg.Go(func() {
				for i := range 50 {
					require.NoError(t, q.Enqueue(context.Background(), queue.Job[int]{Key: fmt.Sprintf("p%d-%d", p, i)}))
				}
			})
		}
		wg.Wait()
		queuetest.Settle()
		st := queuetest.CheckCounts(t, q)
		assert.EqualValues(t, 400, st.Done)
	})
}

// capture is a slog.Handler that keeps every record, with the attributes
// its logger was given, as "key=value" strings.
type capture struct {
	mu    *sync.Mutex
	recs  *[]capturedRecord
	attrs []slog.Attr
	level slog.Level
}

type capturedRecord struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

func newCapture(level slog.Level) *capture {
	return &capture{mu: &sync.Mutex{}, recs: &[]capturedRecord{}, level: level}
}

func (c *capture) Enabled(_ context.Context, l slog.Level) bool { return l >= c.level }
func (c *capture) Handle(_ context.Context, r slog.Record) error {
	rec := capturedRecord{level: r.Level, msg: r.Message, attrs: map[string]string{}}
	for _, a := range c.attrs {
		rec.attrs[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool {
		rec.attrs[a.Key] = a.Value.String()
		return true
	})
	c.mu.Lock()
	*c.recs = append(*c.recs, rec)
	c.mu.Unlock()
	return nil
}
func (c *capture) WithAttrs(as []slog.Attr) slog.Handler {
	d := *c
	d.attrs = append(append([]slog.Attr{}, c.attrs...), as...)
	return &d
}
func (c *capture) WithGroup(string) slog.Handler { return c }

func (c *capture) records() []capturedRecord {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]capturedRecord(nil), *c.recs...)
}

func (c *capture) count(msg string) int {
	n := 0
	for _, r := range c.records() {
		if r.msg == msg {
			n++
		}
	}
	return n
}

func (c *capture) find(msg string) (capturedRecord, bool) {
	for _, r := range c.records() {
		if r.msg == msg {
			return r, true
		}
	}
	return capturedRecord{}, false
}

func TestLoggingStructuredNeverPayloads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newCapture(slog.LevelDebug)
		lifecycle(t, queue.WithLogger(slog.New(h)), queue.WithName("announces"))
		recs := h.records()
		require.NotEmpty(t, recs)
		for _, r := range recs {
			assert.Equal(t, "announces", r.attrs["queue"], "%s: every record names its queue", r.msg)
			assert.NotContains(t, r.msg, obsMarker)
			for k, v := range r.attrs {
				assert.NotContains(t, v, obsMarker, "%s: attribute %s shows the payload", r.msg, k)
			}
		}

		dead, ok := h.find("job dead-lettered")
		require.True(t, ok)
		assert.Equal(t, slog.LevelWarn, dead.level)
		assert.Equal(t, map[string]string{"queue": "announces", "outcome": "dead", "job": dead.attrs["job"],
			"key": "dead", "target": "", "attempt": "1", "err": "permanent: bad request"}, dead.attrs)

		retried, ok := h.find("job retried")
		require.True(t, ok)
		assert.Equal(t, slog.LevelDebug, retried.level)
		assert.Equal(t, "retried", retried.attrs["outcome"])
		assert.Equal(t, "retry", retried.attrs["key"])
		assert.Equal(t, "1", retried.attrs["attempt"])
		assert.Equal(t, "flaky upstream", retried.attrs["err"])

		for _, msg := range []string{"job done", "job cancelled", "job coalesced", "job dropped", "target suspended", "target disabled"} {
			assert.Positive(t, h.count(msg), "no %q record", msg)
		}
	})
}

// At info level a healthy run logs nothing per job.
func TestLoggingInfoLevelIsQuietForHealthyJobs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newCapture(slog.LevelInfo)
		q, err := queue.New(func(context.Context, queue.Job[string]) error { return nil }, queue.WithLogger(slog.New(h)))
		require.NoError(t, err)
		queuetest.Start(t, q)
		for i := range 100 {
			require.NoError(t, q.Enqueue(context.Background(), queue.Job[string]{Key: fmt.Sprint(i), Payload: obsMarker}))
		}
		queuetest.Advance(5 * time.Second)
		assert.Empty(t, h.records())
	})
}

// Without WithLogger the queue logs nothing, not even to slog's default.
func TestLoggingQuietByDefault(t *testing.T) {
	h := newCapture(slog.LevelDebug)
	prev := slog.Default()
	slog.SetDefault(slog.New(h))
	t.Cleanup(func() { slog.SetDefault(prev) })
	synctest.Test(t, func(t *testing.T) {
		lifecycle(t)
	})
	assert.Empty(t, h.records())
}

func TestLoggingWarnDepthOnceEachWay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newCapture(slog.LevelInfo)
		gate := make(chan struct{})
		q, err := queue.New(func(ctx context.Context, j queue.Job[string]) error {
			<-gate
			return nil
		}, queue.WithWorkers(1, 1), queue.WithWarnDepth(3), queue.WithScaling(queue.ScaleByFill, 0, 0, time.Second),
			queue.WithLogger(slog.New(h)))
		require.NoError(t, err)
		queuetest.Start(t, q)
		for i := range 5 { // one runs, four wait
			require.NoError(t, q.Enqueue(context.Background(), queue.Job[string]{Key: fmt.Sprint(i), Payload: obsMarker}))
		}
		queuetest.Advance(1500 * time.Millisecond)
		assert.Equal(t, 1, h.count("backlog reached warn depth"))
		queuetest.Advance(10 * time.Second)
		assert.Equal(t, 1, h.count("backlog reached warn depth"), "logged once, not every tick")
		assert.Zero(t, h.count("backlog back below warn depth"))
		rec, _ := h.find("backlog reached warn depth")
		assert.Equal(t, slog.LevelWarn, rec.level)
		assert.Equal(t, "4", rec.attrs["depth"])
		assert.Equal(t, "3", rec.attrs["warn_depth"])

		close(gate)
		queuetest.Advance(10 * time.Second)
		assert.Equal(t, 1, h.count("backlog back below warn depth"))
		assert.Equal(t, 1, h.count("backlog reached warn depth"))
	})
}

func TestLoggingDropsOncePerEpisode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newCapture(slog.LevelInfo)
		gate := make(chan struct{})
		q, err := queue.New(func(ctx context.Context, j queue.Job[string]) error {
			<-gate
			return nil
		}, queue.WithWorkers(1, 1), queue.WithCapacity(2, 0), queue.WithLogger(slog.New(h)))
		require.NoError(t, err)
		queuetest.Start(t, q)
		enqueue := func(n int) (dropped int) {
			for range n {
				if errors.Is(q.Enqueue(context.Background(), queue.Job[string]{Payload: obsMarker}), queue.ErrQueueFull) {
					dropped++
				}
			}
			return dropped
		}
		require.Equal(t, 0, enqueue(1))
		queuetest.Settle()              // the worker takes it
		require.Equal(t, 7, enqueue(9)) // one runs, two wait, seven dropped
		queuetest.Advance(time.Second)
		require.Equal(t, 5, enqueue(5))
		queuetest.Advance(time.Second)
		assert.Equal(t, 1, h.count("ready queue full: dropping jobs"), "one warning per episode")
		close(gate)
		queuetest.Advance(3 * time.Second)
		assert.Equal(t, 1, h.count("ready queue accepting jobs again"))
		rec, _ := h.find("ready queue accepting jobs again")
		assert.Equal(t, "12", rec.attrs["dropped"])
		assert.Equal(t, "12", rec.attrs["dropped_full_total"])
	})
}
