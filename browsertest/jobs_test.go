package browsertest

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/admin"
)

// The dead jobs, job detail and pause of the page, which the admin API
// feeds (dashboard.WithAdmin).

// card is a JavaScript expression: the value the overview card named
// name shows.
func card(name string) string {
	return `Array.from(document.querySelectorAll("#overview .card")).find(c => c.querySelector(".k").textContent === "` +
		name + `").querySelector(".v").textContent`
}

// gated fails every job while failing holds, and then succeeds: a
// downstream that is down until it is fixed.
func gated(failing *atomic.Bool) queue.Handler[string] {
	return func(ctx context.Context, j queue.Job[string]) error {
		if failing.Load() {
			return errors.New("billing API: 503 Service Unavailable")
		}
		return nil
	}
}

// deadJob is a job of key on target billing, dead-lettered while its
// downstream is down (failing), shown on an open page: id is its ID and
// retry the selector of its Retry button.
type deadJob struct {
	b         *browser
	s         *site
	failing   *atomic.Bool
	id, retry string
}

func openDeadJob(t *testing.T, key string) deadJob {
	t.Helper()
	d := deadJob{b: newBrowser(t), failing: new(atomic.Bool)}
	d.failing.Store(true)
	d.s = newAdminSite(t, gated(d.failing)) // one attempt: the first failure dead-letters
	require.NoError(t, d.s.q.Enqueue(t.Context(), queue.Job[string]{Key: key, Target: "billing", Payload: "charge"}))
	dead := d.s.ev.await(t, "the job dead-lettered", is(queue.EventDead, key))
	d.id = strconv.FormatInt(dead.JobID, 10)
	d.b.open(t, d.s.url)
	d.retry = `#dead button[data-job-action="retry"][data-job="` + d.id + `"]`
	d.b.do(t, chromedp.WaitVisible(chromedp.CSS(d.retry)))
	return d
}

func TestRetryDeadJobFromPage(t *testing.T) {
	const key = "invoice-42"
	d := openDeadJob(t, key)
	b, s, id, retry := d.b, d.s, d.id, d.retry
	cells := eval[[]string](t, b, `Array.from(document.querySelector('`+retry+`').closest("tr").cells).map(td => td.textContent)`)
	require.Len(t, cells, 7)
	assert.Equal(t, []string{id, key, "billing", "1", "billing API: 503 Service Unavailable"}, cells[:5])
	assert.Equal(t, "retrydelete", cells[6], "the row's actions")
	waitJS(t, b, card("dead now")+` === "1"`)
	before := s.q.Stats()

	// The downstream is fixed; the operator retries the job from the page.
	d.failing.Store(false)
	b.do(t, chromedp.Click(chromedp.CSS(retry)))
	done := s.ev.await(t, "the retried job to run to done", is(queue.EventDone, key))
	assert.NoError(t, done.Err)
	assert.True(t, s.ev.seen(func(ev queue.Event) bool {
		return ev.Kind == queue.EventStarted && ev.Key == key && ev.JobID == done.JobID
	}))
	eventually(t, "Stats to count the job done", func() bool { return s.q.Stats().Done == before.Done+1 })
	assert.Equal(t, before.Dead, s.q.Stats().Dead, "dead-lettered once, not again")
	counts, err := s.q.Admin().Counts(t.Context())
	require.NoError(t, err)
	assert.Zero(t, counts[admin.Dead], "the dead list still holds it")

	// The page shows it: the notice, the emptied list, the counters.
	waitJS(t, b, `document.getElementById("notice").textContent === "retry job `+id+`: done"`)
	// Recorded before the answer left, so before the notice showed.
	assert.Equal(t, []string{"/api/jobs/" + id + "/retry 200"}, s.postsSeen())
	waitJS(t, b, `document.querySelector("#dead tbody td.empty")?.textContent === "no dead jobs"`)
	waitJS(t, b, card("dead now")+` === "0" && `+card("done")+` === "1"`)
	problems, dialogs := b.reported()
	assert.Empty(t, problems)
	assert.Empty(t, dialogs, "retry asks for no confirmation")
}

// pausedBadges is a JavaScript expression: how many badges in the
// page's header say "paused".
const pausedBadges = `Array.from(document.querySelectorAll("header .badge")).filter(b => !b.hidden && b.textContent === "paused").length`

func TestPauseResumeFromPage(t *testing.T) {
	b := newBrowser(t)
	s := newAdminSite(t, handle, queue.WithWorkers(2, 2))
	s.run(t, queue.Job[string]{Key: "warm-up", Payload: "ok"}) // the workers now wait in Claim
	b.open(t, s.url)
	b.do(t, chromedp.WaitVisible(chromedp.ID("pause-btn")))
	assert.Zero(t, eval[int](t, b, pausedBadges))

	b.do(t, chromedp.Click(chromedp.ID("pause-btn")))
	waitJS(t, b, pausedBadges+` === 1 && document.getElementById("pause-btn").hidden &&
		!document.getElementById("resume-btn").hidden && document.getElementById("notice").textContent === "queue paused"`)
	paused, err := s.q.Admin().Paused(t.Context())
	require.NoError(t, err)
	require.True(t, paused)

	// Paused, the workers claim nothing: the job enqueued now stays
	// pending while the page refreshes ten times (a second or more).
	require.NoError(t, s.q.Enqueue(t.Context(), queue.Job[string]{Key: "while-paused", Payload: "ok"}))
	samples := eval[int](t, b, `Number(document.getElementById("chart").dataset.samples)`)
	waitJS(t, b, `Number(document.getElementById("chart").dataset.samples) >= `+strconv.Itoa(samples+10))
	assert.False(t, s.ev.seen(is(queue.EventStarted, "while-paused")), "a worker ran a job while the queue was paused")
	counts, err := s.q.Admin().Counts(t.Context())
	require.NoError(t, err)
	assert.Equal(t, 1, counts[admin.Ready]+counts[admin.Scheduled], "pending: %v", counts)
	assert.Zero(t, counts[admin.Running])
	assert.EqualValues(t, 1, s.q.Stats().Done)
	waitJS(t, b, card("done")+` === "1"`)

	b.do(t, chromedp.Click(chromedp.ID("resume-btn")))
	s.ev.await(t, "the job to run after the resume", is(queue.EventDone, "while-paused"))
	paused, err = s.q.Admin().Paused(t.Context())
	require.NoError(t, err)
	assert.False(t, paused)
	waitJS(t, b, pausedBadges+` === 0 && !document.getElementById("pause-btn").hidden &&
		document.getElementById("resume-btn").hidden && document.getElementById("notice").textContent === "queue resumed"`)
	waitJS(t, b, card("done")+` === "2"`)
	assert.Subset(t, s.postsSeen(), []string{"/api/queue/pause 200", "/api/queue/resume 200"})
	problems, dialogs := b.reported()
	assert.Empty(t, problems)
	assert.Empty(t, dialogs)
}

func TestJobDetailHidesPayload(t *testing.T) {
	const secret = "card=4111-1111-1111-1111;cvc=737"
	b := newBrowser(t)
	s := newAdminSite(t, func(context.Context, queue.Job[string]) error { return errors.New("gateway timeout") })
	require.NoError(t, s.q.Enqueue(t.Context(), queue.Job[string]{Key: "order-7", Target: "payments", Payload: secret}))
	dead := s.ev.await(t, "the job dead-lettered", is(queue.EventDead, "order-7"))
	id := strconv.FormatInt(dead.JobID, 10)
	// The store holds the payload, for whoever asks the admin API for it.
	j, err := s.q.Admin().Get(t.Context(), dead.JobID, true)
	require.NoError(t, err)
	require.Contains(t, string(j.Payload), secret)

	b.open(t, s.url)
	link := `#dead button[data-job="` + id + `"]:not([data-job-action])`
	b.do(t, chromedp.Click(chromedp.CSS(link)))
	b.do(t, chromedp.WaitVisible(chromedp.ID("job-detail")))
	assert.Equal(t, id, eval[string](t, b, `document.getElementById("job-detail-id").textContent`))
	detail := eval[map[string]string](t, b, `Object.fromEntries(Array.from(document.querySelectorAll("#job-detail dt")).
		map(dt => [dt.textContent, dt.nextElementSibling.textContent]))`)
	assert.Equal(t, "dead", detail["state"])
	assert.Equal(t, "order-7", detail["key"])
	assert.Equal(t, "payments", detail["target"])
	assert.Equal(t, "normal", detail["priority"])
	assert.Equal(t, "1", detail["attempt"])
	assert.Equal(t, "gateway timeout", detail["last error"])
	assert.NotEmpty(t, detail["updated"])
	assert.NotContains(t, detail, "payload")

	// The payload is nowhere: not in the page, not in what the page
	// fetches.
	assert.False(t, eval[bool](t, b, `document.documentElement.outerHTML.includes("4111")`), "the page shows the payload")
	for _, path := range []string{"api/jobs/" + id, "api/jobs/dead", "api/state"} {
		body := eval[string](t, b, `fetch("`+path+`").then(r => r.text())`)
		assert.Contains(t, body, "order-7", path)
		assert.NotContains(t, body, "4111", path)
		assert.NotContains(t, body, "payload", path)
	}
	problems, dialogs := b.reported()
	assert.Empty(t, problems)
	assert.Empty(t, dialogs)
}

// TestRetryClickWhileDeadListRefreshes presses the Retry button, lets the
// page refresh the dead list, and then releases it, as a click that takes
// a moment does when it lands on a refresh.
func TestRetryClickWhileDeadListRefreshes(t *testing.T) {
	const key = "invoice-43"
	d := openDeadJob(t, key)
	b, s, id, retry := d.b, d.s, d.id, d.retry
	d.failing.Store(false)

	xy := eval[[]float64](t, b, `(() => { const b = document.querySelector('`+retry+`'); b.scrollIntoView({block: "center"});
		const r = b.getBoundingClientRect(); return [r.x + r.width/2, r.y + r.height/2]; })()`)
	lists := s.deadListsServed()
	b.do(t, chromedp.MouseEvent(chromedp.MousePressed, xy[0], xy[1], chromedp.ButtonLeft, chromedp.ClickCount(1)))
	// The page fetches the dead list every five refreshes; by the time it
	// fetches it twice more, it has shown the first of them.
	eventually(t, "the page to fetch the dead list twice", func() bool { return s.deadListsServed() >= lists+2 })
	b.do(t, chromedp.MouseEvent(chromedp.MouseReleased, xy[0], xy[1], chromedp.ButtonLeft, chromedp.ClickCount(1)))
	s.ev.await(t, "the retried job to run to done", is(queue.EventDone, key))
	waitJS(t, b, `document.getElementById("notice").textContent === "retry job `+id+`: done"`)
}

func TestDeleteAsksFirst(t *testing.T) {
	const key = "invoice-44"
	d := openDeadJob(t, key)
	b, s, id := d.b, d.s, d.id
	del := `#dead button[data-job-action="delete"][data-job="` + id + `"]`
	want := "confirm: Delete job " + id + "? It cannot be undone."

	// The operator answers Cancel: nothing is sent, the job stays dead.
	b.do(t, chromedp.Click(chromedp.CSS(del)))
	eventually(t, "the confirmation to open", func() bool { _, dl := b.reported(); return len(dl) == 1 })
	_, dialogs := b.reported()
	assert.Equal(t, []string{want}, dialogs)
	// The page is answered (the dialog closed) before it reads on: a
	// round trip through it proves the click's handler returned.
	assert.True(t, eval[bool](t, b, `true`))
	assert.Empty(t, s.postsSeen(), "a dismissed delete posts nothing")
	counts, err := s.q.Admin().Counts(t.Context())
	require.NoError(t, err)
	assert.Equal(t, 1, counts[admin.Dead])

	// Now OK: the job is deleted.
	b.accept.Store(true)
	b.do(t, chromedp.Click(chromedp.CSS(del)))
	waitJS(t, b, `document.getElementById("notice").textContent === "delete job `+id+`: done"`)
	_, dialogs = b.reported()
	assert.Equal(t, []string{want, want}, dialogs)
	assert.Equal(t, []string{"/api/jobs/" + id + "/delete 200"}, s.postsSeen())
	_, err = s.q.Admin().Get(t.Context(), mustID(t, id), false)
	assert.ErrorIs(t, err, admin.ErrNotFound)
	waitJS(t, b, `document.querySelector("#dead tbody td.empty")?.textContent === "no dead jobs"`)
	problems, _ := b.reported()
	assert.Empty(t, problems)
}

func mustID(t *testing.T, s string) int64 {
	t.Helper()
	id, err := strconv.ParseInt(s, 10, 64)
	require.NoError(t, err)
	return id
}
