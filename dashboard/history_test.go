package dashboard

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/admin"
	"github.com/queuekit/queue/queuetest"
)

// fakeSource is a Source whose Stats the test sets.
type fakeSource struct {
	mu sync.Mutex
	st queue.Stats
}

func (f *fakeSource) Stats() queue.Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.st
}
func (f *fakeSource) set(fn func(st *queue.Stats))             { f.mu.Lock(); fn(&f.st); f.mu.Unlock() }
func (f *fakeSource) Target(string) (queue.TargetStatus, bool) { return queue.TargetStatus{}, false }
func (f *fakeSource) Suspend(string, time.Duration) error      { return nil }
func (f *fakeSource) Resume(string) error                      { return nil }
func (f *fakeSource) Disable(string, error) error              { return nil }

func TestHistorySamplesAtMostOncePerInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := &fakeSource{}
		rec := new(Recorder)
		h := newHandler(t, src, WithInterval(time.Second), WithHistory(4), WithRecorder(rec))

		s, _ := getState(t, h)
		require.Len(t, s.History, 1)
		assert.Zero(t, s.History[0].Throughput, "the first sample has nothing to compare with")

		// Polls within the interval share the sample.
		queuetest.Advance(500 * time.Millisecond)
		s, _ = getState(t, h)
		require.Len(t, s.History, 1)

		// 30 jobs done in 2 s, 10 ms and 50 ms each (mean 30 ms).
		queuetest.Advance(1500 * time.Millisecond)
		src.set(func(st *queue.Stats) { st.Done = 30; st.Failed = 4; st.Depth = 12 })
		for i := range 30 {
			d := 10 * time.Millisecond
			if i%2 == 1 {
				d = 50 * time.Millisecond
			}
			rec.Observe(queue.Event{Kind: queue.EventDone, Delay: d})
		}
		s, _ = getState(t, h)
		require.Len(t, s.History, 2)
		p := s.History[1]
		assert.Equal(t, 12, p.Depth)
		assert.Equal(t, uint64(30), p.Done)
		assert.InDelta(t, 15, p.Throughput, 1e-9)
		assert.InDelta(t, 2, p.Failures, 1e-9)
		require.NotNil(t, p.LatencyMs)
		assert.InDelta(t, 30, *p.LatencyMs, 1e-9)
		assert.InDelta(t, 50, *p.LatencyMaxMs, 1e-9)
		assert.False(t, p.Gap)

		// Nothing ran: no mean, and the longest is reset.
		queuetest.Advance(time.Second)
		s, _ = getState(t, h)
		p = s.History[2]
		assert.Nil(t, p.LatencyMs)
		assert.InDelta(t, 0, *p.LatencyMaxMs, 1e-9)
		assert.Zero(t, p.Throughput)

		// Nobody watched for a minute: a gap.
		queuetest.Advance(time.Minute)
		s, _ = getState(t, h)
		assert.True(t, s.History[3].Gap)

		// The ring is bounded: the oldest sample goes.
		queuetest.Advance(time.Second)
		first := s.History[0].T
		s, _ = getState(t, h)
		require.Len(t, s.History, 4)
		assert.Greater(t, s.History[0].T, first)
		for i := 1; i < len(s.History); i++ {
			assert.Greater(t, s.History[i].T, s.History[i-1].T, "oldest first")
		}
	})
}

func TestWithoutRecorderNoLatency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHandler(t, &fakeSource{})
		getState(t, h)
		queuetest.Advance(time.Second)
		s, _ := getState(t, h)
		assert.False(t, s.Latency)
		require.Len(t, s.History, 2)
		assert.Nil(t, s.History[1].LatencyMs)
		assert.Nil(t, s.History[1].LatencyMaxMs)
	})
}

func TestRecorderKnowsBoundedTargets(t *testing.T) {
	rec := new(Recorder)
	for i := range maxKnownTargets + 50 {
		rec.Observe(queue.Event{Kind: queue.EventEnqueued, Target: string(rune('a'+i%26)) + time.Duration(i).String()})
	}
	rec.Observe(queue.Event{Kind: queue.EventStarted, Target: "a0s"}) // already known
	assert.Len(t, rec.targets(), maxKnownTargets)
}

// Healthy targets, which Stats leaves out, are listed from the Recorder;
// unhealthy ones from Stats, once each.
func TestTargetsMergeRecorderAndStats(t *testing.T) {
	rec := new(Recorder)
	q := newQueue(t, queue.WithObserver(rec.Observe))
	rec.Observe(queue.Event{Kind: queue.EventEnqueued, Target: "b-healthy"})
	rec.Observe(queue.Event{Kind: queue.EventEnqueued, Target: "a-down"})
	require.NoError(t, q.Suspend("b-healthy", 0)) // makes the queue know it
	require.NoError(t, q.Resume("b-healthy"))
	require.NoError(t, q.Disable("a-down", nil))
	h := newHandler(t, q, WithRecorder(rec))
	s, _ := getState(t, h)
	require.Len(t, s.Targets, 2)
	assert.Equal(t, "a-down", s.Targets[0].Name)
	assert.Equal(t, "disabled", s.Targets[0].Health)
	assert.Equal(t, "b-healthy", s.Targets[1].Name)
	assert.Equal(t, "healthy", s.Targets[1].Health)
}

// With WithAdmin and no Recorder, the chart's run time is the admin
// API's sample: no observer on the queue.
func TestLatencyFromAdminWithoutRecorder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		q, err := queue.New(func(_ context.Context, j queue.Job[int]) error {
			time.Sleep(time.Duration(j.Payload) * time.Millisecond) // the job's work, in the bubble's time
			return nil
		}, queue.WithWorkers(2, 2))
		require.NoError(t, err)
		h := newHandler(t, q, WithAdmin(q.Admin()), WithInterval(100*time.Millisecond))
		require.NoError(t, q.Start(ctx))
		defer func() { require.NoError(t, q.Shutdown(ctx)) }()
		s, _ := getState(t, h)
		assert.True(t, s.Latency)
		// The first run of each worker after the poll is timed.
		require.NoError(t, q.Enqueue(ctx, queue.Job[int]{Payload: 20}))
		require.NoError(t, q.Enqueue(ctx, queue.Job[int]{Payload: 40}))
		queuetest.Advance(100 * time.Millisecond)
		s, _ = getState(t, h)
		require.Len(t, s.History, 2)
		p := s.History[1]
		require.NotNil(t, p.LatencyMs)
		assert.InDelta(t, 30, *p.LatencyMs, 1e-9)
		assert.InDelta(t, 40, *p.LatencyMaxMs, 1e-9)
		assert.InDelta(t, 20, p.Throughput, 1e-9, "2 jobs in 100 ms")
	})
}

// A dashboard of a queue reads run times and healthy targets from the
// queue's own counters: no Recorder given, no observer, no admin API.
func TestDefaultRecorderReadsTheQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q, err := queue.New(func(context.Context, queue.Job[int]) error {
			time.Sleep(30 * time.Millisecond) // the bubble's clock: exactly 30 ms
			return nil
		}, queue.WithWorkers(1, 1))
		require.NoError(t, err)
		ctx := context.Background()
		require.NoError(t, q.Start(ctx))
		defer func() { require.NoError(t, q.Shutdown(ctx)) }()
		h := newHandler(t, q, WithInterval(time.Second))

		s, _ := getState(t, h) // the first poll turns the workers' sampling on
		require.True(t, s.Latency)
		require.NoError(t, q.Enqueue(ctx, queue.Job[int]{Target: "healthy"}))
		synctest.Wait() // until the worker waits for the next job
		queuetest.Advance(time.Second)
		s, _ = getState(t, h)
		require.Len(t, s.History, 2)
		p := s.History[1]
		require.NotNil(t, p.LatencyMs, "the worker's first run after a poll is sampled")
		assert.InDelta(t, 30, *p.LatencyMs, 1e-9)
		assert.InDelta(t, 30, *p.LatencyMaxMs, 1e-9)
		require.Len(t, s.Targets, 1)
		assert.Equal(t, "healthy", s.Targets[0].Name)
		assert.Equal(t, "healthy", s.Targets[0].Health)
	})
}

// NewRecorder reads its source and ignores Observe; it lists at most
// maxKnownTargets of the source's names, with those remembered from the
// page's actions, once each.
func TestNewRecorderReadsItsSource(t *testing.T) {
	src := &runSource{rt: admin.RunTimes{Runs: 3, Total: 30 * time.Millisecond, Longest: 20 * time.Millisecond}}
	for i := range maxKnownTargets + 5 {
		src.names = append(src.names, fmt.Sprintf("t%04d", i))
	}
	rec := NewRecorder(src)
	rec.Observe(queue.Event{Kind: queue.EventDone, Delay: time.Hour, Target: "observed"})
	runs, nanos, longest := rec.take()
	assert.Equal(t, uint64(3), runs)
	assert.Equal(t, int64(30*time.Millisecond), nanos)
	assert.Equal(t, int64(20*time.Millisecond), longest)
	rec.remember("t0000")
	rec.remember("acted-on")
	names := rec.targets()
	assert.Len(t, names, maxKnownTargets+1)
	assert.Equal(t, "acted-on", names[0])
	assert.NotContains(t, names, "observed")
	assert.Panics(t, func() { NewRecorder(nil) })
}

type runSource struct {
	rt    admin.RunTimes
	names []string
}

func (r *runSource) RunTimes() admin.RunTimes { return r.rt }
func (r *runSource) TargetNames() []string    { return slices.Clone(r.names) }
