package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/admin"
	"github.com/queuekit/queue/queuetype"
)

func newQueue(t *testing.T, opts ...queue.Option) *queue.Queue[string] {
	t.Helper()
	q, err := queue.New(func(context.Context, queue.Job[string]) error { return nil }, opts...)
	require.NoError(t, err)
	return q
}

func newHandler(t *testing.T, src Source, opts ...Option) *Handler {
	t.Helper()
	h, err := New(src, opts...)
	require.NoError(t, err)
	return h
}

func do(h http.Handler, method, path string, body string, hdr map[string]string) *httptest.ResponseRecorder {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, path, rd)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// getState fetches and decodes api/state.
func getState(t *testing.T, h http.Handler) (state, string) {
	t.Helper()
	rec := do(h, "GET", "/api/state", "", nil)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	var s state
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &s))
	return s, rec.Body.String()
}

// same-origin headers, as a browser sends them with the page's fetch.
func sameOrigin(token string) map[string]string {
	return map[string]string{"Content-Type": "application/json", TokenHeader: token,
		"Sec-Fetch-Site": "same-origin", "Origin": "http://example.com"}
}

func TestNewRejectsBadOptions(t *testing.T) {
	q := newQueue(t)
	for name, o := range map[string]Option{
		"WithInterval": WithInterval(0), "WithHistory": WithHistory(1), "WithRecorder": WithRecorder(nil), "WithAdmin": WithAdmin(nil),
	} {
		_, err := New(q, o)
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), name)
	}
	_, err := New(nil)
	require.Error(t, err)
}

func TestHeadersOnEveryResponse(t *testing.T) {
	h := newHandler(t, newQueue(t))
	cases := []struct {
		method, path string
		code         int
		ctype        string
	}{
		{"GET", "/", 200, "text/html; charset=utf-8"},
		{"GET", "/app.js", 200, "text/javascript; charset=utf-8"},
		{"GET", "/app.css", 200, "text/css; charset=utf-8"},
		{"GET", "/favicon.svg", 200, "image/svg+xml"},
		{"GET", "/api/state", 200, "application/json"},
		{"GET", "/api/jobs/dead", 501, "application/json"},
		{"POST", "/api/targets/suspend", 403, "application/json"},
		{"GET", "/nope", 404, ""},
	}
	for _, c := range cases {
		rec := do(h, c.method, c.path, "", nil)
		assert.Equal(t, c.code, rec.Code, c.path)
		if c.ctype != "" {
			assert.Equal(t, c.ctype, rec.Header().Get("Content-Type"), c.path)
		}
		csp := rec.Header().Get("Content-Security-Policy")
		assert.Contains(t, csp, "default-src 'none'", c.path)
		assert.Contains(t, csp, "script-src 'self'", c.path)
		assert.Contains(t, csp, "frame-ancestors 'none'", c.path)
		assert.NotContains(t, csp, "unsafe-inline", c.path)
		assert.NotContains(t, csp, "unsafe-eval", c.path)
		assert.Equal(t, "nosniff", rec.Header().Get("X-Content-Type-Options"), c.path)
		assert.Equal(t, "DENY", rec.Header().Get("X-Frame-Options"), c.path)
		assert.Equal(t, "no-store", rec.Header().Get("Cache-Control"), c.path)
	}
}

func TestMethods(t *testing.T) {
	h := newHandler(t, newQueue(t), WithActions(true))
	for _, c := range []struct {
		method, path string
		code         int
	}{
		{"HEAD", "/", 200},
		{"HEAD", "/api/state", 200},
		{"POST", "/", 405},
		{"PUT", "/api/state", 405},
		{"DELETE", "/app.js", 405},
		{"GET", "/api/targets/suspend", 405},
		{"PUT", "/api/targets/suspend", 405},
		{"GET", "/api/jobs/1/retry", 405},
	} {
		rec := do(h, c.method, c.path, "", nil)
		assert.Equal(t, c.code, rec.Code, "%s %s", c.method, c.path)
		if c.code == 405 {
			assert.NotEmpty(t, rec.Header().Get("Allow"), "%s %s", c.method, c.path)
		}
	}
}

func TestReadOnlyRefusesActions(t *testing.T) {
	q := newQueue(t)
	h := newHandler(t, q)
	s, _ := getState(t, h)
	assert.False(t, s.Actions)
	assert.Empty(t, s.CSRF, "a read-only dashboard hands out no token")
	// Even with the handler's own token, a read-only dashboard refuses.
	for _, path := range []string{"/api/targets/suspend", "/api/targets/disable", "/api/targets/enable", "/api/jobs/1/retry"} {
		rec := do(h, "POST", path, `{"target":"t1"}`, sameOrigin(h.token))
		assert.Equal(t, http.StatusForbidden, rec.Code, path)
		assert.Contains(t, rec.Body.String(), "read-only", path)
	}
	_, seen := q.Target("t1")
	assert.False(t, seen, "the refused action reached the queue")
}

func TestActionsRefusedWithoutCSRFProtection(t *testing.T) {
	q := newQueue(t)
	h := newHandler(t, q, WithActions(true))
	s, _ := getState(t, h)
	require.NotEmpty(t, s.CSRF)
	good := sameOrigin(s.CSRF)
	with := func(k, v string) map[string]string {
		m := map[string]string{}
		for a, b := range good {
			m[a] = b
		}
		if v == "" {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	for name, c := range map[string]struct {
		hdr  map[string]string
		code int
	}{
		"missing token":          {with(TokenHeader, ""), 403},
		"wrong token":            {with(TokenHeader, s.CSRF+"x"), 403},
		"token of another":       {with(TokenHeader, newHandler(t, q, WithActions(true)).token), 403},
		"cross-site fetch":       {with("Sec-Fetch-Site", "cross-site"), 403},
		"same-site, other port":  {with("Sec-Fetch-Site", "same-site"), 403},
		"cross origin, no fetch": {map[string]string{"Content-Type": "application/json", TokenHeader: s.CSRF, "Origin": "http://evil.test"}, 403},
		"html form body":         {with("Content-Type", "application/x-www-form-urlencoded"), 415},
		"text body":              {with("Content-Type", "text/plain"), 415},
	} {
		rec := do(h, "POST", "/api/targets/suspend", `{"target":"t1","seconds":60}`, c.hdr)
		assert.Equal(t, c.code, rec.Code, name)
		_, seen := q.Target("t1")
		require.False(t, seen, "%s: the refused action reached the queue", name)
	}
	rec := do(h, "POST", "/api/targets/suspend", `{"target":"t1","seconds":60}`, good)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	st, ok := q.Target("t1")
	require.True(t, ok)
	assert.False(t, st.SuspendedUntil.IsZero())
	// A client that is not a browser (no Origin, no Sec-Fetch-Site)
	// still needs the token.
	rec = do(h, "POST", "/api/targets/disable", `{"target":"t1"}`, map[string]string{"Content-Type": "application/json"})
	assert.Equal(t, http.StatusForbidden, rec.Code)
}

func TestTargetActions(t *testing.T) {
	q := newQueue(t)
	h := newHandler(t, q, WithActions(true))
	post := func(action, body string) *httptest.ResponseRecorder {
		return do(h, "POST", "/api/targets/"+action, body, sameOrigin(h.token))
	}
	var tv targetView
	rec := post("suspend", `{"target":"up","seconds":120}`)
	require.Equal(t, 200, rec.Code, rec.Body.String())
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &tv))
	assert.Equal(t, "suspended", tv.Health)

	rec = post("disable", `{"target":"up","reason":"maintenance"}`)
	require.Equal(t, 200, rec.Code)
	st, _ := q.Target("up")
	assert.True(t, st.Disabled)
	assert.Equal(t, "maintenance", st.Reason)

	rec = post("enable", `{"target":"up"}`)
	require.Equal(t, 200, rec.Code)
	st, _ = q.Target("up")
	assert.False(t, st.Disabled)
	assert.True(t, st.SuspendedUntil.IsZero())

	require.Equal(t, 200, post("suspend", `{"target":"up"}`).Code, "0 s: the queue's default")
	require.Equal(t, 200, post("resume", `{"target":"up"}`).Code)
	st, _ = q.Target("up")
	assert.True(t, st.SuspendedUntil.IsZero())

	assert.Equal(t, 404, post("resume", `{"target":"never-seen"}`).Code)
	assert.Equal(t, 404, post("explode", `{"target":"up"}`).Code)
	assert.Equal(t, 400, post("suspend", `{"target":"up","seconds":-1}`).Code)
	assert.Equal(t, 400, post("suspend", `{"target":"up","seconds":1e9}`).Code)
	assert.Equal(t, 400, post("suspend", `{"target":""}`).Code)
	assert.Equal(t, 400, post("suspend", `not json`).Code)
	assert.Equal(t, 400, post("suspend", `{"target":"`+strings.Repeat("x", 5000)+`"}`).Code, "body over 4 KiB")
}

// A key, a target and an error text holding markup come back escaped, and
// the page's script never builds markup from data.
func TestStateEscapesMarkup(t *testing.T) {
	const evil = `<script>alert(1)</script><img src=x onerror=alert(2)>`
	dead := make(chan struct{})
	rec := new(Recorder)
	q, err := queue.New(func(context.Context, queue.Job[string]) error { return errors.New("boom " + evil) },
		queue.WithRetry(1, 0, 0), queue.WithObserver(rec.Observe),
		queue.WithObserver(func(ev queue.Event) {
			if ev.Kind == queue.EventDead {
				close(dead)
			}
		}))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); _ = q.Shutdown(context.Background()) })
	require.NoError(t, q.Start(ctx))
	require.NoError(t, q.Enqueue(ctx, queue.Job[string]{Key: "k" + evil, Target: "t" + evil, Payload: "secret payload"}))
	<-dead
	require.NoError(t, q.Disable("d"+evil, errors.New("r"+evil)))

	h := newHandler(t, q, WithRecorder(rec))
	s, body := getState(t, h)
	assert.NotContains(t, body, "<")
	assert.NotContains(t, body, ">")
	assert.Contains(t, body, `\u003cscript\u003e`)
	assert.NotContains(t, body, "secret payload")
	require.Len(t, s.RecentErrors, 1)
	assert.Equal(t, "k"+evil, s.RecentErrors[0].Key, "the text survives, escaped only in transport")
	names := []string{}
	for _, tv := range s.Targets {
		names = append(names, tv.Name)
	}
	assert.ElementsMatch(t, []string{"d" + evil, "t" + evil}, names)
}

func TestPageBuildsNoMarkupFromData(t *testing.T) {
	js, err := assets.ReadFile("assets/app.js")
	require.NoError(t, err)
	for _, bad := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "Function(", "setAttribute(\"on", "srcdoc"} {
		assert.NotContains(t, string(js), bad)
	}
	html, err := assets.ReadFile("assets/index.html")
	require.NoError(t, err)
	page := string(html)
	assert.Equal(t, 1, strings.Count(page, "<script"), "one script, from a file")
	assert.Contains(t, page, `<script src="app.js"`)
	assert.NotContains(t, page, "style=")
	assert.NotRegexp(t, `\son[a-z]+\s*=`, page, "no inline event handlers")
	assert.NotContains(t, page, "http://")
	assert.NotContains(t, page, "https://")
}

// fakeAdmin is an admin.Store with one dead job, ID 7.
type fakeAdmin struct {
	retried, deleted []int64
	paused           bool
}

func (f *fakeAdmin) List(_ context.Context, fl admin.Filter, _ bool, _ *admin.Cursor, _ int, _ bool) ([]admin.JobInfo, error) {
	if fl.State != admin.Dead {
		return nil, nil
	}
	return []admin.JobInfo{{ID: 7, Key: "<b>k</b>", State: admin.Dead, Attempt: 3, LastError: "x", Payload: []byte("secret")}}, nil
}

func (f *fakeAdmin) Get(_ context.Context, id int64, _ bool) (admin.JobInfo, error) {
	if id != 7 {
		return admin.JobInfo{}, admin.ErrNotFound
	}
	return admin.JobInfo{ID: 7, State: admin.Dead, Payload: []byte("secret"),
		Meta: queuetype.MetaOf(map[string]string{"tenant": "<img src=x onerror=alert(1)>"})}, nil
}

func (f *fakeAdmin) GetKey(context.Context, string, bool) (admin.JobInfo, error) {
	return admin.JobInfo{}, admin.ErrNotFound
}

func (f *fakeAdmin) Counts(context.Context) (map[admin.State]int, error) {
	return map[admin.State]int{admin.Dead: 1}, nil
}

func (f *fakeAdmin) Retry(_ context.Context, id int64) error {
	if id != 7 {
		return admin.ErrNotFound
	}
	f.retried = append(f.retried, id)
	return nil
}

func (f *fakeAdmin) Delete(_ context.Context, id int64) error {
	if id != 7 {
		return admin.ErrNotFound
	}
	f.deleted = append(f.deleted, id)
	return nil
}

func (f *fakeAdmin) Cancel(context.Context, int64) error  { return admin.ErrState }
func (f *fakeAdmin) Pause(context.Context) error          { f.paused = true; return nil }
func (f *fakeAdmin) Resume(context.Context) error         { f.paused = false; return nil }
func (f *fakeAdmin) Paused(context.Context) (bool, error) { return f.paused, nil }

func TestJobsPlaceholderAndPlugIn(t *testing.T) {
	q := newQueue(t)
	bare := newHandler(t, q, WithActions(true))
	s, _ := getState(t, bare)
	assert.False(t, s.Jobs)
	for _, c := range []struct{ method, path string }{{"GET", "/api/jobs/dead"}, {"GET", "/api/jobs/7"}, {"POST", "/api/jobs/7/retry"}} {
		assert.Equal(t, http.StatusNotImplemented, do(bare, c.method, c.path, "{}", sameOrigin(bare.token)).Code, c.path)
	}

	f := &fakeAdmin{}
	h := newHandler(t, q, WithActions(true), WithAdmin(admin.New(f)))
	s, _ = getState(t, h)
	assert.True(t, s.Jobs)
	assert.False(t, s.Paused)
	assert.Equal(t, 1, s.States["dead"])
	rec := do(h, "GET", "/api/jobs/dead", "", nil)
	require.Equal(t, 200, rec.Code)
	assert.Contains(t, rec.Body.String(), `\u003cb\u003ek`)
	assert.NotContains(t, rec.Body.String(), "secret", "no payloads")
	detail := do(h, "GET", "/api/jobs/7", "", nil)
	assert.Equal(t, 200, detail.Code)
	assert.NotContains(t, detail.Body.String(), "secret", "no payloads")
	assert.Contains(t, detail.Body.String(), `"meta":{"tenant":"\u003cimg src=x onerror=alert(1)\u003e"}`, "the detail has the metadata, escaped")
	assert.NotContains(t, rec.Body.String(), `"meta"`, "lists leave the metadata out")
	assert.Equal(t, 404, do(h, "GET", "/api/jobs/8", "", nil).Code)
	assert.Equal(t, 400, do(h, "GET", "/api/jobs/x", "", nil).Code)

	assert.Equal(t, 403, do(h, "POST", "/api/jobs/7/retry", "{}", map[string]string{"Content-Type": "application/json"}).Code)
	assert.Empty(t, f.retried, "retry without the token")
	assert.Equal(t, 200, do(h, "POST", "/api/jobs/7/retry", "{}", sameOrigin(h.token)).Code)
	assert.Equal(t, 200, do(h, "POST", "/api/jobs/7/delete", "{}", sameOrigin(h.token)).Code)
	assert.Equal(t, 404, do(h, "POST", "/api/jobs/8/retry", "{}", sameOrigin(h.token)).Code)
	assert.Equal(t, 404, do(h, "POST", "/api/jobs/7/explode", "{}", sameOrigin(h.token)).Code)
	assert.Equal(t, []int64{7}, f.retried)
	assert.Equal(t, []int64{7}, f.deleted)

	assert.Equal(t, 403, do(h, "POST", "/api/queue/pause", "{}", map[string]string{"Content-Type": "application/json"}).Code)
	assert.False(t, f.paused, "pause without the token")
	assert.Equal(t, 200, do(h, "POST", "/api/queue/pause", "{}", sameOrigin(h.token)).Code)
	s, _ = getState(t, h)
	assert.True(t, s.Paused)
	assert.Equal(t, 200, do(h, "POST", "/api/queue/resume", "{}", sameOrigin(h.token)).Code)
	assert.False(t, f.paused)
	assert.Equal(t, 404, do(h, "POST", "/api/queue/explode", "{}", sameOrigin(h.token)).Code)
	assert.Equal(t, 501, do(bare, "POST", "/api/queue/pause", "{}", sameOrigin(bare.token)).Code)
}

// A real queue's admin API behind the page: a dead job is listed and
// retried from it.
func TestAdminOfAQueue(t *testing.T) {
	ctx := context.Background()
	fail := make(chan struct{}, 1)
	fail <- struct{}{}
	dead := make(chan struct{}, 1)
	done := make(chan struct{}, 1)
	q, err := queue.New(func(context.Context, queue.Job[int]) error {
		select {
		case <-fail:
			return queue.Permanent(errors.New("no"))
		default:
			done <- struct{}{}
			return nil
		}
	}, queue.WithObserver(func(ev queue.Event) {
		if ev.Kind == queue.EventDead {
			dead <- struct{}{}
		}
	}))
	require.NoError(t, err)
	require.NoError(t, q.Start(ctx))
	t.Cleanup(func() { _ = q.Shutdown(ctx) })
	require.NoError(t, q.Enqueue(ctx, queue.Job[int]{Key: "<script>x</script>"}))
	<-dead
	h := newHandler(t, q, WithActions(true), WithAdmin(q.Admin()))
	rec := do(h, "GET", "/api/jobs/dead", "", nil)
	require.Equal(t, 200, rec.Code)
	var jobs []JobInfo
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &jobs))
	require.Len(t, jobs, 1)
	assert.Equal(t, "<script>x</script>", jobs[0].Key)
	assert.NotContains(t, rec.Body.String(), "<script>")
	assert.Equal(t, 200, do(h, "POST", fmt.Sprintf("/api/jobs/%d/retry", jobs[0].ID), "{}", sameOrigin(h.token)).Code)
	<-done
	assert.Equal(t, 404, do(h, "POST", fmt.Sprintf("/api/jobs/%d/retry", jobs[0].ID), "{}", sameOrigin(h.token)).Code)
}
