package dashboard

import (
	"context"
	"encoding/json"
	"net/http"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/admin"
)

// slowCounts is an admin.Store whose Counts takes 2 s, as pgstore's does
// at a million jobs, and counts its calls.
type slowCounts struct {
	fakeAdmin
	calls atomic.Int32
}

func (f *slowCounts) Counts(ctx context.Context) (map[admin.State]int, error) {
	n := f.calls.Add(1)
	select {
	case <-time.After(2 * time.Second):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return map[admin.State]int{admin.Dead: int(n)}, nil
}

// stateJSON polls api/state and returns its JSON and how long it took.
func stateJSON(t *testing.T, h http.Handler) (map[string]any, time.Duration) {
	t.Helper()
	start := time.Now()
	rec := do(h, "GET", "/api/state", "", nil)
	took := time.Since(start)
	require.Equal(t, http.StatusOK, rec.Code)
	var m map[string]any
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &m))
	return m, took
}

// deadOf is the dead count in a JSON answer's states.
func deadOf(m map[string]any) any {
	st, _ := m["states"].(map[string]any)
	return st["dead"]
}

// TestStateDoesNotCountEveryPoll: polls answer with the last count of
// jobs per state and its age, at once; a new count starts in the
// background once the last is 30 s old, one for every tab; GET
// api/counts counts now.
func TestStateDoesNotCountEveryPoll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &slowCounts{}
		h := newHandler(t, newQueue(t), WithAdmin(admin.New(f)))
		m, _ := stateJSON(t, h) // the first poll waits for the first count
		require.Equal(t, 1.0, deadOf(m))
		for range 20 { // twenty polls of several tabs within the next 20 s
			time.Sleep(time.Second)
			m, took := stateJSON(t, h)
			assert.Zero(t, took, "a poll waited for a count")
			assert.Equal(t, 1.0, deadOf(m))
		}
		assert.EqualValues(t, 1, f.calls.Load(), "Counts called on polls")
		m, _ = stateJSON(t, h)
		assert.InDelta(t, 22_000, m["states_age_ms"], 1, "the count's age, from its start")
		assert.NotEmpty(t, m["states_counted_at"])

		time.Sleep(10 * time.Second) // the count is 30 s old: a poll starts another
		m, took := stateJSON(t, h)
		assert.Zero(t, took)
		assert.Equal(t, true, m["states_counting"])
		assert.Equal(t, 1.0, deadOf(m), "the last count, while the next runs")
		stateJSON(t, h)
		synctest.Wait()
		assert.EqualValues(t, 2, f.calls.Load(), "one count for both polls")
		time.Sleep(2 * time.Second)
		synctest.Wait()
		m, _ = stateJSON(t, h)
		assert.Equal(t, 2.0, deadOf(m))
		assert.Equal(t, false, m["states_counting"])
		assert.InDelta(t, 2_000, m["states_took_ms"], 1)

		// Count now: a fresh count, shared by callers at the same time.
		time.Sleep(3 * time.Second)
		rec := do(h, "GET", "/api/counts", "", nil)
		require.Equal(t, http.StatusOK, rec.Code)
		var c map[string]any
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &c))
		assert.Equal(t, 3.0, deadOf(c))
		assert.EqualValues(t, 2000, c["states_age_ms"], "counted now: started 2 s ago")
		rec = do(h, "GET", "/api/counts", "", nil) // within countGap: the same count
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &c))
		assert.Equal(t, 3.0, deadOf(c))
		assert.EqualValues(t, 3, f.calls.Load())
	})
}

// slowSource is a queue whose Stats takes 900 ms, as pgstore's does at a
// million jobs (it counts the jobs not ended).
type slowSource struct {
	*queue.Queue[string]
	calls atomic.Int32
}

func (s *slowSource) Stats() queue.Stats {
	s.calls.Add(1)
	time.Sleep(900 * time.Millisecond)
	return s.Queue.Stats()
}

// TestSlowStatsTakenInBackground: when the source's Stats is slow, polls
// answer at once with the last snapshot and its age, and one snapshot is
// taken in the background for every tab.
func TestSlowStatsTakenInBackground(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := &slowSource{Queue: newQueue(t)}
		h := newHandler(t, src)
		_, took := stateJSON(t, h) // the first poll waits
		assert.Equal(t, 900*time.Millisecond, took)
		for range 10 {
			time.Sleep(time.Second)
			m, took := stateJSON(t, h)
			stateJSON(t, h) // a second tab
			assert.Zero(t, took, "a poll waited for Stats")
			assert.Contains(t, m, "stats_age_ms")
		}
		time.Sleep(time.Second) // the last background Stats ends
		synctest.Wait()
		assert.LessOrEqual(t, src.calls.Load(), int32(11), "one Stats a poll interval for both tabs")
	})
}
