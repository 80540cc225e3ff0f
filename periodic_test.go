package queue_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/queuetest"
)

// periodOf returns the period in a periodic run's key.
func periodOf(t *testing.T, key string) time.Time {
	t.Helper()
	i := strings.LastIndexByte(key, ':')
	require.Positive(t, i, key)
	sec, err := strconv.ParseInt(key[i+1:], 10, 64)
	require.NoError(t, err, key)
	return time.Unix(sec, 0)
}

// A day of a one-minute schedule: 1440 runs, each at its minute, none
// early, none twice. Registered at midnight (the bubble's start, a fire
// time), the first run is a minute later: never at start.
func TestPeriodicDayOfMinutes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var rec recorder[int]
		q := startQueue(t, rec.handler(nil))
		start := time.Now() // the bubble starts at midnight UTC
		require.Equal(t, start, start.Truncate(time.Minute))
		require.NoError(t, q.Periodic("tick", queue.Every(time.Minute), queue.Job[int]{Payload: 7}, queue.PeriodicOptions{}))

		advance(24 * time.Hour)
		runs := rec.all()
		require.Len(t, runs, 1440)
		seen := map[string]bool{}
		for i, r := range runs {
			assert.False(t, seen[r.job.Key], "period run twice: %s", r.job.Key)
			seen[r.job.Key] = true
			p := periodOf(t, r.job.Key)
			assert.True(t, p.Equal(start.Add(time.Duration(i+1)*time.Minute)), "run %d is of period %v", i, p)
			late := r.at.Sub(p)
			assert.True(t, late >= 0 && late <= time.Millisecond, "run of %v ran %v after its time", p, late)
			assert.Equal(t, 7, r.job.Payload)
		}
		st := queuetest.CheckCounts(t, q)
		require.Len(t, st.Periodic, 1)
		ps := st.Periodic[0]
		assert.Equal(t, "tick", ps.Name)
		assert.Equal(t, int64(1440), ps.Runs)
		assert.True(t, ps.Last.Equal(start.Add(24*time.Hour)), "last %v", ps.Last)
		assert.True(t, ps.Next.Equal(start.Add(24*time.Hour+time.Minute)), "next %v", ps.Next)
		assert.Equal(t, "done", ps.LastOutcome)
		assert.Equal(t, uint64(1440), st.Done)
	})
}

func TestPeriodicReplaceAndRemove(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var rec recorder[int]
		q := startQueue(t, rec.handler(nil))
		start := time.Now()
		require.NoError(t, q.Periodic("p", queue.Every(time.Minute), queue.Job[int]{Payload: 1}, queue.PeriodicOptions{}))
		advance(150 * time.Second) // runs at 1m, 2m
		require.Equal(t, []int{1, 1}, rec.payloads())

		// Replaced at 2m30s: from the next fire of the new schedule (10m).
		require.NoError(t, q.Periodic("p", queue.Every(10*time.Minute), queue.Job[int]{Payload: 2}, queue.PeriodicOptions{}))
		advance(20 * time.Minute)
		require.Equal(t, []int{1, 1, 2, 2}, rec.payloads())
		runs := rec.all()
		assert.Equal(t, 10*time.Minute, runs[2].at.Sub(start))
		assert.Equal(t, 20*time.Minute, runs[3].at.Sub(start))
		st := q.Stats()
		require.Len(t, st.Periodic, 1)
		assert.Equal(t, int64(4), st.Periodic[0].Runs, "the status is kept across a replacement")

		assert.True(t, q.RemovePeriodic("p"))
		assert.False(t, q.RemovePeriodic("p"))
		advance(time.Hour)
		assert.Len(t, rec.all(), 4, "no run after removal")
		assert.Empty(t, q.Stats().Periodic)

		// Registered again, it starts anew.
		require.NoError(t, q.Periodic("p", queue.Every(time.Hour), queue.Job[int]{Payload: 3}, queue.PeriodicOptions{}))
		advance(time.Hour)
		assert.Equal(t, []int{1, 1, 2, 2, 3}, rec.payloads())
	})
}

// A process that starts (or registers) late: the current period is run
// only with CatchUp or RunAtStart, however recently it came.
func TestPeriodicMissedAtStart(t *testing.T) {
	for _, tc := range []struct {
		name  string
		late  time.Duration
		opts  queue.PeriodicOptions
		first time.Duration // the first run's period, from midnight
		at    time.Duration // when it ran
	}{
		{"skip", 30 * time.Minute, queue.PeriodicOptions{}, time.Hour, time.Hour},
		{"a period just came", 4 * time.Second, queue.PeriodicOptions{}, time.Hour, time.Hour},
		{"catch up", 30 * time.Minute, queue.PeriodicOptions{CatchUp: true}, 0, 30 * time.Minute},
		{"run at start", 30 * time.Minute, queue.PeriodicOptions{RunAtStart: true}, 0, 30 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				midnight := time.Now()
				advance(tc.late) // the process was down
				var rec recorder[int]
				q := newQueue(t, rec.handler(nil))
				require.NoError(t, q.Periodic("hourly", queue.Every(time.Hour), queue.Job[int]{}, tc.opts))
				queuetest.Start(t, q)
				advance(2*time.Hour - tc.late - time.Second)
				runs := rec.all()
				require.NotEmpty(t, runs)
				assert.Equal(t, midnight.Add(tc.first), periodOf(t, runs[0].job.Key).In(midnight.Location()))
				assert.Equal(t, tc.at, runs[0].at.Sub(midnight))
				for _, r := range runs[1:] {
					assert.Equal(t, r.at, periodOf(t, r.job.Key).In(midnight.Location()))
				}
			})
		})
	}
}

// A loop that wakes late by several periods (the process stalled; the
// fake clock jumps) skips them, or runs the most recent once with CatchUp.
func TestPeriodicMissedWhileRunning(t *testing.T) {
	for _, catchUp := range []bool{false, true} {
		t.Run(fmt.Sprint("catchUp=", catchUp), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
				clk := queuetest.NewFakeClock(start)
				var rec recorder[int]
				q := startQueue(t, rec.handler(nil), queue.WithClock(clk))
				require.NoError(t, q.Periodic("m", queue.Every(time.Minute), queue.Job[int]{}, queue.PeriodicOptions{CatchUp: catchUp}))
				queuetest.Settle()
				if catchUp {
					require.Len(t, rec.all(), 1) // midnight's, at registration: CatchUp runs at start
				} else {
					require.Empty(t, rec.all()) // the first period is 00:01
				}
				clk.Advance(10*time.Minute + 30*time.Second)
				queuetest.Settle()
				runs := rec.all()
				st := q.Stats().Periodic[0]
				if catchUp {
					require.Len(t, runs, 2)
					assert.Equal(t, "periodic:m:"+strconv.FormatInt(start.Add(10*time.Minute).Unix(), 10), runs[1].job.Key)
					assert.Equal(t, "done", st.LastOutcome)
				} else {
					require.Empty(t, runs)
					assert.Equal(t, "skipped", st.LastOutcome)
				}
				assert.Equal(t, start.Add(10*time.Minute), st.Last)
				assert.Equal(t, start.Add(11*time.Minute), st.Next)
				// And on time again from then on.
				clk.Advance(30 * time.Second)
				queuetest.Settle()
				assert.Equal(t, "periodic:m:"+strconv.FormatInt(start.Add(11*time.Minute).Unix(), 10), rec.all()[len(rec.all())-1].job.Key)
			})
		})
	}
}

func TestPeriodicJitter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const jitter = 20 * time.Second
		var a, b recorder[int]
		qa := startQueue(t, a.handler(nil), queue.WithName("a"))
		qb := startQueue(t, b.handler(nil), queue.WithName("b"))
		opts := queue.PeriodicOptions{Jitter: jitter}
		require.NoError(t, qa.Periodic("j", queue.Every(time.Minute), queue.Job[int]{}, opts))
		require.NoError(t, qb.Periodic("j", queue.Every(time.Minute), queue.Job[int]{}, opts))
		advance(101*time.Minute - time.Second) // periods 1m to 100m
		runs := a.all()
		require.Len(t, runs, 100)
		delays := map[time.Duration]bool{}
		for i, r := range runs {
			d := r.at.Sub(periodOf(t, r.job.Key))
			assert.True(t, d >= 0 && d < jitter, "delay %v out of [0, %v)", d, jitter)
			delays[d] = true
			assert.Equal(t, r.at, b.all()[i].at, "every process computes the same delay")
		}
		assert.Greater(t, len(delays), 50, "the delays differ from period to period")
	})
}

func TestPeriodicValidation(t *testing.T) {
	q, err := queue.New(func(context.Context, queue.Job[int]) error { return nil })
	require.NoError(t, err)
	defer q.Stop(context.Background())
	every := queue.Every(time.Minute)
	for _, tc := range []struct {
		name    string
		s       queue.Schedule
		job     queue.Job[int]
		opts    queue.PeriodicOptions
		want    string
		invalid bool // wraps ErrInvalidJob
	}{
		{name: "", s: every, want: `Periodic(""): the name is empty`},
		{name: "a b", s: every, want: `holds ' ' at byte 1`},
		{name: strings.Repeat("x", 129), s: every, want: "129 bytes long; at most 128"},
		{name: "n", s: nil, want: `Periodic("n"): the schedule is nil`},
		{name: "n", s: queue.Every(0), want: "Every(0s): the interval must be > 0"},
		{name: "n", s: queue.Every(-time.Second), want: "Every(-1s): the interval must be > 0"},
		{name: "n", s: never{}, want: "the schedule never fires after now"},
		{name: "n", s: every, opts: queue.PeriodicOptions{Jitter: -1}, want: "Jitter is -1ns; it must be >= 0"},
		{name: "n", s: every, job: queue.Job[int]{Key: "k"}, want: `Key is "k"; leave it zero`, invalid: true},
		{name: "n", s: every, job: queue.Job[int]{RunAt: time.Unix(1, 0)}, want: "RunAt is", invalid: true},
		{name: "n", s: every, job: queue.Job[int]{UniqueFor: time.Hour}, want: "UniqueFor is 1h0m0s", invalid: true},
		{name: "n", s: every, job: queue.Job[int]{ID: 3}, want: "ID is 3", invalid: true},
		{name: "n", s: every, job: queue.Job[int]{MaxAttempts: -1}, want: "MaxAttempts is -1", invalid: true},
		{name: "n", s: every, job: queue.Job[int]{Priority: "urgent"}, want: `: unknown priority "urgent" (the queue's priorities: high, normal, low)`},
	} {
		err := q.Periodic(tc.name, tc.s, tc.job, tc.opts)
		require.Error(t, err, tc.want)
		assert.Contains(t, err.Error(), tc.want)
		assert.True(t, strings.HasPrefix(err.Error(), "queue: Periodic("), err.Error())
		assert.Equal(t, tc.invalid, errors.Is(err, queue.ErrInvalidJob), err.Error())
	}
	assert.Empty(t, q.Stats().Periodic, "nothing registered")
	require.NoError(t, q.Periodic("ok-name_1.2:3/4@5", every, queue.Job[int]{Priority: "high", Target: "t"}, queue.PeriodicOptions{}))
	require.NoError(t, q.Stop(context.Background()))
	assert.ErrorIs(t, q.Periodic("late", every, queue.Job[int]{}, queue.PeriodicOptions{}), queue.ErrClosed)
}

type never struct{}

func (never) Next(time.Time) time.Time { return time.Time{} }

// A run is an ordinary job: it retries and is dead-lettered, and the
// status, /stats and the metrics show its outcome.
func TestPeriodicOutcomes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewPedanticRegistry()
		release := make(chan struct{})
		q := startQueue(t, func(ctx context.Context, j queue.Job[int]) error {
			switch j.Payload {
			case 1:
				return queue.Permanent(errors.New("boom"))
			case 2:
				<-release
			}
			return nil
		}, queue.WithMetrics(reg, 1), queue.WithName("per"), queue.WithRetry(2, time.Second, time.Second))
		start := time.Now()
		require.NoError(t, q.Periodic("fails", queue.Every(time.Hour), queue.Job[int]{Payload: 1}, queue.PeriodicOptions{}))
		require.NoError(t, q.Periodic("slow", queue.Every(time.Hour), queue.Job[int]{Payload: 2}, queue.PeriodicOptions{}))
		advance(time.Hour) // the first period: never at start
		st := q.Stats()
		require.Len(t, st.Periodic, 2)
		assert.Equal(t, queue.PeriodicStatus{Name: "fails", Next: start.Add(2 * time.Hour), Last: start.Add(time.Hour),
			LastOutcome: "dead", LastError: "permanent: boom", Runs: 1}, st.Periodic[0])
		assert.Equal(t, "running", st.Periodic[1].LastOutcome)

		rr := httptest.NewRecorder()
		q.StatsHandler().ServeHTTP(rr, httptest.NewRequest("GET", "/stats", nil))
		body, _ := io.ReadAll(rr.Body)
		assert.Contains(t, string(body), "periodic:\n  fails                next 2000-01-01T02:00:00Z  last 2000-01-01T01:00:00Z dead: permanent: boom  runs 1\n")
		rr = httptest.NewRecorder()
		q.StatsHandler().ServeHTTP(rr, httptest.NewRequest("GET", "/stats?format=json", nil))
		body, _ = io.ReadAll(rr.Body)
		assert.Contains(t, string(body), `"name": "slow",
      "next": "2000-01-01T02:00:00Z",
      "last": "2000-01-01T01:00:00Z",
      "last_outcome": "running",
      "runs": 1`)

		close(release)
		queuetest.Settle()
		require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP queue_periodic_enqueued_total Periods whose run this process enqueued, by periodic job.
# TYPE queue_periodic_enqueued_total counter
queue_periodic_enqueued_total{name="fails",queue="per"} 1
queue_periodic_enqueued_total{name="slow",queue="per"} 1
# HELP queue_periodic_last_run_timestamp_seconds The latest period of each periodic job that came, in seconds since the epoch (0: none yet).
# TYPE queue_periodic_last_run_timestamp_seconds gauge
queue_periodic_last_run_timestamp_seconds{name="fails",queue="per"} 9.466884e+08
queue_periodic_last_run_timestamp_seconds{name="slow",queue="per"} 9.466884e+08
# HELP queue_periodic_next_run_timestamp_seconds The next period of each periodic job, in seconds since the epoch (0: never); at most 100 names.
# TYPE queue_periodic_next_run_timestamp_seconds gauge
queue_periodic_next_run_timestamp_seconds{name="fails",queue="per"} 9.46692e+08
queue_periodic_next_run_timestamp_seconds{name="slow",queue="per"} 9.46692e+08
# HELP queue_periodic_runs_total Runs of periodic jobs in this process, by periodic job and outcome: done, retried, dead or cancelled.
# TYPE queue_periodic_runs_total counter
queue_periodic_runs_total{name="fails",outcome="cancelled",queue="per"} 0
queue_periodic_runs_total{name="fails",outcome="dead",queue="per"} 1
queue_periodic_runs_total{name="fails",outcome="done",queue="per"} 0
queue_periodic_runs_total{name="fails",outcome="retried",queue="per"} 0
queue_periodic_runs_total{name="slow",outcome="cancelled",queue="per"} 0
queue_periodic_runs_total{name="slow",outcome="dead",queue="per"} 0
queue_periodic_runs_total{name="slow",outcome="done",queue="per"} 1
queue_periodic_runs_total{name="slow",outcome="retried",queue="per"} 0
# HELP queue_periodic_skipped_total Missed periods not run (PeriodicOptions.CatchUp), by periodic job.
# TYPE queue_periodic_skipped_total counter
queue_periodic_skipped_total{name="fails",queue="per"} 0
queue_periodic_skipped_total{name="slow",queue="per"} 0
`), "queue_periodic_enqueued_total", "queue_periodic_last_run_timestamp_seconds", "queue_periodic_next_run_timestamp_seconds",
			"queue_periodic_runs_total", "queue_periodic_skipped_total"))
		problems, err := testutil.GatherAndLint(reg)
		require.NoError(t, err)
		assert.Empty(t, problems)
		assert.Equal(t, "done", q.Stats().Periodic[1].LastOutcome)
	})
}

// A run that is still pending when the next period comes does not hold
// up the next one; the keys differ, so the runs queue up.
func TestPeriodicRetryingRunAndNextPeriod(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var rec recorder[int]
		fail := errors.New("flaky")
		q := startQueue(t, rec.handler(func(_ context.Context, j queue.Job[int]) error {
			if periodOf(t, j.Key).Unix()%120 == 0 && j.Attempt == 1 {
				return fail
			}
			return nil
		}), queue.WithRetry(3, 90*time.Second, 90*time.Second))
		require.NoError(t, q.Periodic("r", queue.Every(time.Minute), queue.Job[int]{}, queue.PeriodicOptions{}))
		advance(2 * time.Minute) // periods 1m (done) and 2m (fails once)
		assert.Equal(t, "retrying", q.Stats().Periodic[0].LastOutcome)
		assert.Equal(t, "flaky", q.Stats().Periodic[0].LastError)
		advance(8 * time.Minute)
		st := queuetest.CheckCounts(t, q)
		assert.Equal(t, int64(10), st.Periodic[0].Runs)
		assert.Equal(t, uint64(5), st.Retried)
	})
}

// PeriodicOptions{} never runs at start: the first run is the first fire
// time strictly after the schedule was registered (or the queue started,
// if later), even when that is at a fire time, as the bubble's start
// (midnight) is, or a second after one.
func TestPeriodicZeroOptionsNeverRunAtStart(t *testing.T) {
	for _, tc := range []struct {
		name     string
		late     time.Duration // registration, after midnight
		running  bool          // registered on a running queue (else before Start)
		firstRun time.Duration // from midnight
	}{
		{"at a fire time, before Start", 0, false, time.Hour},
		{"at a fire time, on a running queue", 0, true, time.Hour},
		{"within the old tolerance", 3 * time.Second, false, time.Hour},
		{"within the old tolerance, running", 3 * time.Second, true, time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				midnight := time.Now()
				var rec recorder[int]
				q := newQueue(t, rec.handler(nil))
				if tc.running {
					queuetest.Start(t, q)
				}
				advance(tc.late)
				require.NoError(t, q.Periodic("hourly", queue.Every(time.Hour), queue.Job[int]{}, queue.PeriodicOptions{}))
				if !tc.running {
					queuetest.Start(t, q)
				}
				synctest.Wait()
				require.Empty(t, rec.all(), "ran at start")
				st := q.Stats().Periodic
				require.Len(t, st, 1)
				assert.Equal(t, midnight.Add(tc.firstRun), st[0].Next.In(midnight.Location()))
				advance(tc.firstRun - tc.late)
				runs := rec.all()
				require.Len(t, runs, 1)
				assert.Equal(t, tc.firstRun, runs[0].at.Sub(midnight))
			})
		})
	}
}
