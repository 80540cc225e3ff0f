package dashboard

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/admin"
)

// long is 100 kB of text without a break, as a key, target or error can be.
var long = strings.Repeat("x", 100_000)

// longAdmin holds 18 dead jobs whose key, target and last error are each
// 100 kB.
type longAdmin struct{ fakeAdmin }

func longJob(id int64) admin.JobInfo {
	return admin.JobInfo{ID: id, State: admin.Dead, Key: "k" + long, Target: "t" + long, LastError: "e" + long}
}

func (f *longAdmin) List(_ context.Context, fl admin.Filter, _ bool, _ *admin.Cursor, _ int, _ bool) ([]admin.JobInfo, error) {
	var out []admin.JobInfo
	for id := int64(1); id <= 18; id++ {
		out = append(out, longJob(id))
	}
	return out, nil
}

func (f *longAdmin) Get(_ context.Context, id int64, _ bool) (admin.JobInfo, error) {
	return longJob(id), nil
}

// TestListsCapLongValues: the dead list carries at most fieldCap bytes of
// each text, flagged truncated, and the job's detail the whole of it
// (api/jobs/dead was 304 kB for 18 jobs with 100 kB values... and 5.4 MB
// here).
func TestListsCapLongValues(t *testing.T) {
	h := newHandler(t, newQueue(t), WithAdmin(admin.New(&longAdmin{})))
	rec := do(h, "GET", "/api/jobs/dead", "", nil)
	require.Equal(t, http.StatusOK, rec.Code)
	assert.Less(t, rec.Body.Len(), 18*4*1024, "api/jobs/dead: %d bytes for 18 jobs", rec.Body.Len())
	var jobs []JobInfo
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &jobs))
	require.Len(t, jobs, 18)
	for _, j := range jobs {
		assert.True(t, j.Truncated)
		assert.LessOrEqual(t, len(j.Key), fieldCap)
		assert.True(t, strings.HasPrefix(j.Key, "kxxx"))
		assert.LessOrEqual(t, len(j.Target), fieldCap)
		assert.LessOrEqual(t, len(j.LastError), fieldCap)
	}
	var one JobInfo
	rec = do(h, "GET", "/api/jobs/3", "", nil)
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &one))
	assert.Equal(t, "k"+long, one.Key, "the detail carries the whole value")
	assert.Equal(t, "e"+long, one.LastError)
	assert.False(t, one.Truncated)
}

// longSource is a queue whose Stats reports ten recent errors and a
// scheduled job with 100 kB texts.
type longSource struct{ *queue.Queue[string] }

func (s longSource) Stats() queue.Stats {
	st := s.Queue.Stats()
	for i := range 10 {
		st.RecentErrors = append(st.RecentErrors, queue.ErrorRecord{Time: time.Now(), JobID: int64(i + 1),
			Key: "k" + long, Target: "t" + long, Error: "e" + long})
	}
	st.NextScheduled = append(st.NextScheduled, queue.ScheduledJob{ID: 99, Key: "k" + long, Target: "t" + long})
	return st
}

// TestStateCapsLongValues: api/state, polled every second by every open
// tab, carries at most fieldCap bytes of each user-written text.
func TestStateCapsLongValues(t *testing.T) {
	h := newHandler(t, longSource{newQueue(t)})
	s, body := getState(t, h)
	assert.Less(t, len(body), 64*1024, "api/state: %d bytes", len(body))
	require.Len(t, s.RecentErrors, 10)
	assert.LessOrEqual(t, len(s.RecentErrors[0].Error), fieldCap)
	assert.True(t, strings.HasPrefix(s.RecentErrors[0].Error, "exxx"))
	require.Len(t, s.NextScheduled, 1)
	assert.LessOrEqual(t, len(s.NextScheduled[0].Key), fieldCap)
}
