package queue_test

import (
	"context"
	"encoding/json"
	"flag"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files in testdata/")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *updateGolden {
		require.NoError(t, os.WriteFile(path, got, 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test -run %s -update to create it", t.Name())
	assert.Equal(t, string(want), string(got), "differs from %s (go test -run %s -update rewrites it)", path, t.Name())
}

// get serves one request to h and returns the response.
func get(h http.Handler, method, target string, header ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, target, nil)
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestStatsHandlerTextGolden(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newObsScenario(t)
		w := get(s.q.StatsHandler(), http.MethodGet, "/stats")
		require.Equal(t, http.StatusOK, w.Code)
		assert.Equal(t, "text/plain; charset=utf-8", w.Header().Get("Content-Type"))
		assert.Equal(t, "no-store", w.Header().Get("Cache-Control"))
		golden(t, "stats.txt", w.Body.Bytes())
	})
}

// TestStatsHandlerNextScheduledAttempts: a scheduled job's Attempt is
// the attempts already made, and the text says so (job 5 failed once and
// waits for its second run: "attempt 1" read as the run it waits for).
func TestStatsHandlerNextScheduledAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newObsScenario(t)
		body := get(s.q.StatsHandler(), http.MethodGet, "/stats").Body.String()
		assert.Contains(t, body, `job 5 key "f" target "slow" attempts so far 1`)
		assert.Contains(t, body, `job 10 key "s" target "" attempts so far 0`)
	})
}

func TestStatsHandlerJSONGolden(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newObsScenario(t)
		w := get(s.q.StatsHandler(), http.MethodGet, "/stats?format=json")
		require.Equal(t, http.StatusOK, w.Code)
		assert.Equal(t, "application/json", w.Header().Get("Content-Type"))
		golden(t, "stats.json", w.Body.Bytes())
	})
}

func TestStatsHandlerContentNegotiation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newObsScenario(t)
		h := s.q.StatsHandler()
		for _, tc := range []struct {
			name, target string
			header       []string
			json         bool
		}{
			{"default", "/stats", nil, false},
			{"format=json", "/stats?format=json", nil, true},
			{"Accept", "/stats", []string{"Accept", "application/json"}, true},
			{"Accept list", "/stats", []string{"Accept", "text/html;q=0.9, application/json"}, true},
			{"format=text wins", "/stats?format=text", []string{"Accept", "application/json"}, false},
			{"browser", "/stats", []string{"Accept", "text/html,application/xhtml+xml,*/*;q=0.8"}, false},
		} {
			w := get(h, http.MethodGet, tc.target, tc.header...)
			require.Equal(t, http.StatusOK, w.Code, tc.name)
			if tc.json {
				assert.Equal(t, "application/json", w.Header().Get("Content-Type"), tc.name)
				assert.True(t, json.Valid(w.Body.Bytes()), tc.name)
			} else {
				assert.Equal(t, "text/plain; charset=utf-8", w.Header().Get("Content-Type"), tc.name)
				assert.True(t, strings.HasPrefix(w.Body.String(), "queue scenario (running, store memory)\n"), tc.name)
			}
		}
		head := get(h, http.MethodHead, "/stats")
		assert.Equal(t, http.StatusOK, head.Code)
	})
}

func TestStatsHandlerRejectsOtherMethods(t *testing.T) {
	q, err := queue.New(func(context.Context, queue.Job[int]) error { return nil })
	require.NoError(t, err)
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch} {
		w := get(q.StatsHandler(), m, "/stats")
		assert.Equal(t, http.StatusMethodNotAllowed, w.Code, m)
		assert.Equal(t, "GET, HEAD", w.Header().Get("Allow"), m)
	}
	require.NoError(t, q.Stop(context.Background()))
}

// The JSON is Stats' own encoding: it decodes back into the same figures.
func TestStatsHandlerJSONDecodesIntoStats(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newObsScenario(t)
		want := s.q.Stats()
		w := get(s.q.StatsHandler(), http.MethodGet, "/stats", "Accept", "application/json")
		var got queue.Stats
		dec := json.NewDecoder(w.Body)
		dec.DisallowUnknownFields()
		require.NoError(t, dec.Decode(&got))

		assert.Equal(t, want.Counts, got.Counts)
		assert.Equal(t, want.Name, got.Name)
		assert.Equal(t, want.State, got.State)
		assert.Equal(t, want.Depth, got.Depth)
		assert.Equal(t, want.Capacity, got.Capacity)
		assert.Equal(t, want.FillPct, got.FillPct)
		assert.Equal(t, want.Store.ReadyByPriority, got.Store.ReadyByPriority)
		assert.Equal(t, want.Store.Scheduled, got.Store.Scheduled)
		assert.Equal(t, want.Store.PendingKeys, got.Store.PendingKeys)
		assert.Equal(t, want.Workers, got.Workers)
		assert.Equal(t, want.MaxWorkers, got.MaxWorkers)
		require.Len(t, got.NextScheduled, len(want.NextScheduled))
		for i := range want.NextScheduled {
			assert.Equal(t, want.NextScheduled[i].Key, got.NextScheduled[i].Key)
			assert.True(t, want.NextScheduled[i].RunAt.Equal(got.NextScheduled[i].RunAt))
		}
		require.Len(t, got.Targets, len(want.Targets))
		for i := range want.Targets {
			assert.Equal(t, want.Targets[i].Name, got.Targets[i].Name)
			assert.Equal(t, want.Targets[i].Disabled, got.Targets[i].Disabled)
			assert.True(t, want.Targets[i].SuspendedUntil.Equal(got.Targets[i].SuspendedUntil))
		}
		require.Len(t, got.RecentErrors, len(want.RecentErrors))
		for i := range want.RecentErrors {
			w, g := want.RecentErrors[i], got.RecentErrors[i]
			assert.True(t, w.Time.Equal(g.Time))
			w.Time, g.Time = time.Time{}, time.Time{}
			assert.Equal(t, w, g)
		}
	})
}

// Payloads never appear on /stats, in either format, even for jobs that
// failed, were scheduled or are waiting for a suspended target.
func TestStatsHandlerNeverShowsPayloads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newObsScenario(t)
		st := s.q.Stats()
		require.NotEmpty(t, st.RecentErrors, "the scenario has failed jobs")
		require.NotEmpty(t, st.NextScheduled, "and scheduled ones")
		h := s.q.StatsHandler()
		for _, target := range []string{"/stats", "/stats?format=json"} {
			body := get(h, http.MethodGet, target).Body.String()
			assert.NotContains(t, body, obsMarker, target)
			assert.NotContains(t, body, "10.0.0.1", target)
			assert.Contains(t, body, "upstream busy", "%s shows the error text", target)
		}
	})
}

// Many concurrent /stats requests while producers and workers are busy:
// run with -race.
func TestStatsHandlerConcurrentRequests(t *testing.T) {
	var ran atomic.Int64
	q, err := queue.New(func(ctx context.Context, j queue.Job[int]) error {
		ran.Add(1)
		if j.Payload%7 == 0 {
			return queue.Permanent(assert.AnError)
		}
		return nil
	}, queue.WithWorkers(4, 8), queue.WithCapacity(100, 0), queue.WithMetrics(nil, 1))
	require.NoError(t, err)
	require.NoError(t, q.Start(context.Background()))
	h := q.StatsHandler()

	const jobs = 2000
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; i < jobs; {
			err := q.Enqueue(context.Background(), queue.Job[int]{Payload: i, Target: "t"})
			if err == nil {
				i++
			} else {
				require.ErrorIs(t, err, queue.ErrQueueFull)
				q.Fanout("k", []string{"a", "b"})
				_ = q.Admit()
			}
		}
	})
	for c := range 4 {
		wg.Go(func() {
			for i := range 50 {
				target := "/stats"
				if (c+i)%2 == 0 {
					target = "/stats?format=json"
				}
				w := get(h, http.MethodGet, target)
				assert.Equal(t, http.StatusOK, w.Code)
				if strings.Contains(target, "json") {
					var st queue.Stats
					assert.NoError(t, json.Unmarshal(w.Body.Bytes(), &st))
				}
			}
		})
	}
	wg.Wait()
	require.NoError(t, q.Stop(context.Background()))
	assert.EqualValues(t, jobs, ran.Load())
}
