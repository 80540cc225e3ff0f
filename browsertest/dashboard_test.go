package browsertest

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
)

var screenshot = flag.String("screenshot", "", "save TestScreenshot's PNG to this file (e.g. ../docs/dashboard.png)")

func TestPageLoadsWithoutConsoleErrors(t *testing.T) {
	b := newBrowser(t)
	s := newSite(t)
	s.run(t, queue.Job[string]{Key: "k1", Target: "up-1", Payload: "ok"},
		queue.Job[string]{Key: "k2", Target: "up-2", Payload: "fail: 503"})
	b.open(t, s.url)
	// A few refreshes, so that re-rendering is covered too.
	waitJS(t, b, `Number(document.getElementById("chart").dataset.samples) >= 5`)
	assert.Equal(t, "browsertest", eval[string](t, b, `document.getElementById("qname").textContent`))
	assert.Equal(t, "actions enabled", eval[string](t, b, `document.getElementById("mode").textContent`))
	assert.Equal(t, 2, eval[int](t, b, `document.querySelectorAll("#targets tbody tr[data-target]").length`))
	assert.Equal(t, 1, eval[int](t, b, `document.querySelectorAll("#errors tbody tr").length`))
	assert.True(t, eval[bool](t, b, `!document.getElementById("jobs-placeholder").hidden`),
		"the dead-jobs placeholder shows until the admin API is plugged in")
	problems, dialogs := b.reported()
	assert.Empty(t, problems, "console errors, exceptions or CSP violations")
	assert.Empty(t, dialogs)
}

func TestChartUpdatesAsJobsRun(t *testing.T) {
	b := newBrowser(t)
	s := newSite(t)
	b.open(t, s.url)
	waitJS(t, b, `Number(document.getElementById("chart").dataset.samples) >= 2`)
	samples := eval[int](t, b, `Number(document.getElementById("chart").dataset.samples)`)
	assert.Equal(t, 0, eval[int](t, b, `Number(document.getElementById("chart").dataset.done)`))

	jobs := make([]queue.Job[string], 40)
	for i := range jobs {
		jobs[i] = queue.Job[string]{Payload: "slow:5ms", Target: "up-1"}
	}
	s.run(t, jobs...)
	waitJS(t, b, `Number(document.getElementById("chart").dataset.done) >= 40`)
	assert.Greater(t, eval[int](t, b, `Number(document.getElementById("chart").dataset.samples)`), samples)
	// The run-time legend shows a number of milliseconds, and the
	// chart's canvas has the depth (blue) and throughput (green) lines.
	waitJS(t, b, `/ms|s$/.test(document.getElementById("cur-latency").textContent)`)
	// The canvas shows the depth (blue) and throughput (green) lines;
	// polled, as a slow first refresh may leave a gap in the lines.
	waitJS(t, b, `(() => {
		const c = document.getElementById("chart"), d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
		let blue = 0, green = 0;
		for (let i = 0; i < d.length; i += 4) {
			const r = d[i], g = d[i+1], bl = d[i+2];
			if (bl > r + 60 && bl > g + 40) blue++;
			if (g > r + 40 && g > bl + 10) green++;
		}
		return blue > 20 && green > 20;
	})()`)
}

func TestTargetActionFromPage(t *testing.T) {
	b := newBrowser(t)
	s := newSite(t)
	s.run(t, queue.Job[string]{Target: "up-1", Payload: "ok"})
	b.open(t, s.url)
	row := `#targets tr[data-target="up-1"]`
	b.do(t, chromedp.WaitVisible(chromedp.CSS(row)))
	assert.Equal(t, "healthy", eval[string](t, b, `document.querySelector('`+row+` .badge').textContent`))

	b.do(t, chromedp.Click(chromedp.CSS(row+` button[data-action="suspend"]`)))
	eventually(t, "up-1 suspended", func() bool {
		st, _ := s.q.Target("up-1")
		return !st.SuspendedUntil.IsZero()
	})
	waitJS(t, b, `document.querySelector('`+row+` .badge').textContent === "suspended"`)

	b.do(t, chromedp.Click(chromedp.CSS(row+` button[data-action="disable"]`)))
	eventually(t, "up-1 disabled", func() bool { st, _ := s.q.Target("up-1"); return st.Disabled })
	waitJS(t, b, `document.querySelector('`+row+` .badge').textContent === "disabled"`)
	waitJS(t, b, `document.getElementById("notice").textContent === "disable up-1: now disabled"`)

	b.do(t, chromedp.Click(chromedp.CSS(row+` button[data-action="enable"]`)))
	eventually(t, "up-1 enabled", func() bool {
		st, _ := s.q.Target("up-1")
		return !st.Disabled && st.SuspendedUntil.IsZero()
	})
	waitJS(t, b, `document.querySelector('`+row+` .badge').textContent === "healthy"`)

	// The form acts on a target by name.
	b.do(t, chromedp.SendKeys(chromedp.ID("target-name"), "up-9"),
		chromedp.Click(chromedp.CSS(`#target-form button[data-action="suspend"]`)))
	eventually(t, "up-9 suspended", func() bool { st, ok := s.q.Target("up-9"); return ok && !st.SuspendedUntil.IsZero() })
	problems, _ := b.reported()
	assert.Empty(t, problems)
}

func TestActionWithoutTokenRefused(t *testing.T) {
	b := newBrowser(t)
	s := newSite(t)
	s.run(t, queue.Job[string]{Target: "up-1", Payload: "ok"})
	b.open(t, s.url)
	post := func(headers string) int {
		return eval[int](t, b, `fetch("api/targets/disable", {method: "POST", headers: `+headers+
			`, body: JSON.stringify({target: "up-1"})}).then(r => r.status)`)
	}
	assert.Equal(t, 403, post(`{"Content-Type": "application/json"}`), "no token")
	assert.Equal(t, 403, post(`{"Content-Type": "application/json", "X-Dashboard-Token": "guess"}`), "wrong token")
	st, _ := s.q.Target("up-1")
	require.False(t, st.Disabled)

	// From another origin (another port of 127.0.0.1), a request the
	// browser sends without a preflight reaches the server and is
	// refused; one with the token header is stopped by the browser's
	// preflight, which the dashboard does not answer with CORS headers.
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, "<!doctype html><title>another site</title><p>hello")
	}))
	defer evil.Close()
	b.do(t, chromedp.Navigate(evil.URL))
	token := eval[string](t, b, `fetch("`+s.url+`api/state").then(r => r.json()).then(j => j.csrf).catch(e => "unreadable")`)
	assert.Equal(t, "unreadable", token, "another origin reads the dashboard's state")
	eval[bool](t, b, `fetch("`+s.url+`api/targets/disable", {method: "POST", mode: "no-cors",
		body: JSON.stringify({target: "up-1"})}).then(() => true, () => true)`) // CORP hides the answer
	eventually(t, "the cross-origin POST to arrive", func() bool { return len(s.postsSeen()) == 3 })
	assert.Equal(t, "/api/targets/disable 403", s.postsSeen()[2])
	sent := eval[string](t, b, `fetch("`+s.url+`api/targets/disable", {method: "POST",
		headers: {"Content-Type": "application/json", "X-Dashboard-Token": "x"},
		body: JSON.stringify({target: "up-1"})}).then(() => "sent").catch(() => "blocked")`)
	assert.Equal(t, "blocked", sent)
	assert.Len(t, s.postsSeen(), 3, "the preflighted request never reached the handler")
	st, _ = s.q.Target("up-1")
	assert.False(t, st.Disabled)
}

func TestMarkupShownAsText(t *testing.T) {
	const key = `<script>alert("key")</script>`
	const target = `<img src=x onerror=alert("target")>`
	const errText = `<script>alert("error")</script><b>bold</b>`
	b := newBrowser(t)
	s := newAdminSite(t, handle) // the dead list and job detail show them too
	const metaText = `<svg onload=alert("meta")>`
	job := queue.Job[string]{Key: key, Target: target, Payload: "fail" + errText}
	job.Meta.Set(`<b>tenant</b>`, metaText)
	s.run(t, job)
	require.NoError(t, s.q.Disable(`<svg onload=alert("disabled")>`, errors.New(`<iframe src="javascript:alert('reason')">`)))
	b.open(t, s.url)
	waitJS(t, b, `document.querySelectorAll("#errors tbody tr td").length >= 6`)
	cells := eval[[]string](t, b, `Array.from(document.querySelectorAll("#errors tbody td")).map(td => td.textContent)`)
	assert.Equal(t, key, cells[2])
	assert.Equal(t, target, cells[3])
	assert.Equal(t, "upstream said: "+errText, cells[5])
	names := eval[[]string](t, b, `Array.from(document.querySelectorAll("#targets tbody tr")).map(tr => tr.dataset.target)`)
	assert.ElementsMatch(t, []string{target, `<svg onload=alert("disabled")>`}, names)
	detail := eval[string](t, b, `document.querySelector('#targets tr[data-target^="<svg"] td:nth-child(6)').textContent`)
	assert.Contains(t, detail, `<iframe src="javascript:alert('reason')">`)
	b.do(t, chromedp.Click(chromedp.CSS(`#dead tbody tr[data-dead-job] button[data-job]:not([data-job-action])`)),
		chromedp.WaitVisible(chromedp.ID("job-detail")))
	dead := eval[[]string](t, b, `Array.from(document.querySelectorAll("#dead tbody td")).map(td => td.textContent)`)
	assert.Equal(t, []string{key, target, "1", "upstream said: " + errText}, dead[1:5])
	jobDetail := eval[[]string](t, b, `Array.from(document.querySelectorAll("#job-detail dd")).map(dd => dd.textContent)`)
	assert.Equal(t, []string{"dead", key, target}, jobDetail[:3])
	assert.Equal(t, "upstream said: "+errText, jobDetail[5])
	assert.Equal(t, metaText, jobDetail[len(jobDetail)-1], "the metadata's value, as text")
	terms := eval[[]string](t, b, `Array.from(document.querySelectorAll("#job-detail dt")).map(dt => dt.textContent)`)
	assert.Equal(t, "meta <b>tenant</b>", terms[len(terms)-1], "the metadata's key, as text")
	// Nothing became an element; nothing ran.
	assert.Equal(t, 1, eval[int](t, b, `document.querySelectorAll("script").length`), "only app.js")
	assert.Zero(t, eval[int](t, b, `document.querySelectorAll("main img, main svg, main iframe, tbody b, tbody script").length`))
	waitJS(t, b, `Number(document.getElementById("chart").dataset.samples) >= 3`)
	_, dialogs := b.reported()
	assert.Empty(t, dialogs, "a dialog opened: markup ran")
}

// TestScreenshot fills a queue with the same demo data every time (targets
// healthy, suspended and disabled; jobs scheduled for a retry; dead jobs;
// periodic jobs), lets the chart gather a few seconds of a steady load,
// shows one dead job's detail, pauses the queue from the page and takes a
// screenshot; with -screenshot FILE it saves it (docs/dashboard.png is
// made so). Only the times and the chart's lines differ between runs.
func TestScreenshot(t *testing.T) {
	b := newBrowser(t)
	s := newAdminSite(t, handle, queue.WithWorkers(4, 8), queue.WithRetry(3, 20*time.Second, time.Minute))
	for i := range 6 {
		s.run(t, queue.Job[string]{Target: "tracker-" + strconv.Itoa(i+1), Payload: "ok"})
	}
	require.NoError(t, s.q.Suspend("tracker-2", 5*time.Minute))
	require.NoError(t, s.q.Disable("tracker-5", errors.New("HTTP 404 from upstream: announce URL gone")))
	for i := range 3 { // failing, retried in 10 to 20 s
		require.NoError(t, s.q.Enqueue(t.Context(), queue.Job[string]{Key: fmt.Sprintf("info:%02x:peer%d", 0xa0+i, i),
			Target: "tracker-3", Payload: "fail HTTP 503 Service Unavailable"}))
	}
	dead := []queue.Job[string]{
		{Key: "scrape:tracker-4:0xc3", Target: "tracker-4", Payload: "fail HTTP 500 Internal Server Error", MaxAttempts: 1},
		{Key: "announce:peer-17", Target: "tracker-6", Payload: "fail connection reset by peer", MaxAttempts: 1},
	}
	for _, j := range dead {
		require.NoError(t, s.q.Enqueue(t.Context(), j))
		s.ev.await(t, j.Key+" dead-lettered", is(queue.EventDead, j.Key))
	}
	require.NoError(t, s.q.Periodic("nightly-report", queue.Every(24*time.Hour), queue.Job[string]{Payload: "ok"},
		queue.PeriodicOptions{RunAtStart: true}))
	require.NoError(t, s.q.Periodic("sync-peers", queue.Every(time.Hour), queue.Job[string]{Payload: "fail HTTP 502 Bad Gateway"},
		queue.PeriodicOptions{RunAtStart: true}))
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // a steady load with run times of 2 to 40 ms
		defer close(done)
		tick := time.NewTicker(4 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
				_ = s.q.Enqueue(t.Context(), queue.Job[string]{Target: "tracker-" + strconv.Itoa(1+i%6),
					Payload: fmt.Sprintf("slow:%dms", 2+(i*7)%38)})
			}
		}
	}()
	b.do(t, chromedp.EmulateViewport(1280, 1000))
	b.open(t, s.url)
	waitJS(t, b, `Number(document.getElementById("chart").dataset.samples) >= 60`)
	close(stop)
	<-done
	waitJS(t, b, `document.querySelectorAll("#dead tbody tr[data-dead-job]").length === 2`)
	b.do(t, chromedp.Click(chromedp.CSS(`#dead tbody tr[data-dead-job] button[data-job]:not([data-job-action])`)),
		chromedp.WaitVisible(chromedp.ID("job-detail")))
	b.do(t, chromedp.Click(chromedp.ID("pause-btn")))
	waitJS(t, b, pausedBadges+` === 1 && document.getElementById("notice").textContent === "queue paused"`)
	// The periodic rows have run (the failing one waits for a retry).
	waitJS(t, b, `Array.from(document.querySelectorAll("#periodic tbody tr")).map(tr => tr.cells[3].textContent).join() === "done,retrying"`)
	problems, dialogs := b.reported()
	require.Empty(t, problems)
	require.Empty(t, dialogs)
	ctx, cancel := contextWithTimeout(b)
	defer cancel()
	buf, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	require.True(t, bytes.HasPrefix(buf, []byte("\x89PNG\r\n\x1a\n")), "a PNG")
	if *screenshot != "" {
		require.NoError(t, os.WriteFile(*screenshot, buf, 0o644))
		t.Logf("saved %s (%d bytes)", *screenshot, len(buf))
	}
}
