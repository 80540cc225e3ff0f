package browsertest

import (
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
)

// TestLongValuesKeepPageUsable: a 100 kB key and error, a target of the
// longest a job may name (1 024 bytes), and 300 bytes without a break, neither stretch the page nor crush the job
// column; the job's detail, with the whole value, shows where the user
// is; a right-to-left override is shown escaped, not obeyed.
func TestLongValuesKeepPageUsable(t *testing.T) {
	long := strings.Repeat("x", 100_000)
	longTarget := strings.Repeat("t", 1024) // Enqueue refuses a longer target
	unbroken := strings.Repeat("y", 300)
	b := newBrowser(t)
	s := newAdminSite(t, handle)
	jobs := []queue.Job[string]{
		{Key: "k" + long, Target: longTarget, Payload: "fail" + long},
		{Key: unbroken, Target: unbroken, Payload: "fail" + unbroken},
		{Key: "k-\u202etxt.exe", Target: "t\u2066x\u2069", Payload: "fail \x1b[2J\u009b"},
	}
	filler := make([]queue.Job[string], 1000) // IDs of four digits, which could stack
	s.run(t, filler...)
	for _, j := range jobs {
		require.NoError(t, s.q.Enqueue(t.Context(), j))
		s.ev.await(t, "dead-lettered", is(queue.EventDead, j.Key))
	}
	b.open(t, s.url)
	waitJS(t, b, `document.querySelectorAll("#dead tbody tr[data-dead-job]").length === 3`)
	waitJS(t, b, `document.querySelectorAll("#errors tbody tr").length === 3`)

	height := eval[int](t, b, `document.documentElement.scrollHeight`)
	assert.Less(t, height, 4000, "the page is %d px tall", height)
	// Each ID and number stays on one line: its text has one line box.
	idLines := eval[[]int](t, b, `Array.from(document.querySelectorAll("#dead tbody td.num, #errors tbody td.num")).map(e => {
		const r = document.createRange(); r.selectNodeContents(e.querySelector("button") || e);
		return new Set(Array.from(r.getClientRects()).filter(x => x.width > 0).map(x => Math.round(x.top))).size; })`)
	require.NotEmpty(t, idLines)
	for _, n := range idLines {
		assert.Equal(t, 1, n, "an ID or number on %d lines: its digits stack", n)
	}
	cells := eval[[]string](t, b, `Array.from(document.querySelectorAll("#dead tbody td, #errors tbody td")).map(td => td.textContent)`)
	for _, c := range cells {
		assert.LessOrEqual(t, len([]rune(c)), 121, "a table cell shows %d characters", len([]rune(c)))
	}
	all := strings.Join(cells, "|")
	assert.Contains(t, all, `k-\u202etxt.exe`, "the override is shown escaped")
	assert.Contains(t, all, `t\u2066x\u2069`)
	assert.Contains(t, all, `\u001b[2J\u009b`)
	assert.NotContains(t, eval[string](t, b, `document.body.textContent`), "\u202e")

	// The detail of the long job, clicked at the bottom of the page,
	// shows in view, with the whole key.
	require.EqualValues(t, 3, s.q.Stats().Counts.Dead)
	sel := `#dead tbody tr[data-dead-job] button[data-job]:not([data-job-action])`
	firstID := eval[string](t, b, `(() => { const bs = Array.from(document.querySelectorAll('`+sel+`'));
		const row = bs.find(x => x.closest("tr").cells[1].textContent.startsWith("kxxx")); row.scrollIntoView(); return row.dataset.job; })()`)
	_, err := strconv.Atoi(firstID)
	require.NoError(t, err)
	b.do(t, chromedp.Click(chromedp.CSS(`#dead tbody button[data-job="`+firstID+`"]:not([data-job-action])`)),
		chromedp.WaitVisible(chromedp.ID("job-detail")))
	waitJS(t, b, `document.getElementById("job-detail-id").textContent === "`+firstID+`"`)
	inView := eval[bool](t, b, `(() => { const r = document.getElementById("job-detail").getBoundingClientRect();
		return r.top >= 0 && r.top < window.innerHeight && r.bottom <= window.innerHeight + 1 && r.height > 0; })()`)
	assert.True(t, inView, "the job's detail shows where the user is")
	keyLen := eval[int](t, b, `Array.from(document.querySelectorAll("#job-detail dd"))[1].textContent.length`)
	assert.Equal(t, 100_001, keyLen, "the detail has the whole key")
	problems, _ := b.reported()
	assert.Empty(t, problems)
}

// TestCountNowFromPage: the jobs per state are counted in the
// background, not on every poll, and the page says how old the count is;
// "count now" counts at once.
func TestCountNowFromPage(t *testing.T) {
	b := newBrowser(t)
	s := newAdminSite(t, handle)
	b.open(t, s.url)
	waitJS(t, b, `!document.getElementById("states-age").hidden && document.getElementById("states-age-text").textContent.includes("ago")`)
	assert.Equal(t, "0", eval[string](t, b, card("dead now")))
	require.NoError(t, s.q.Enqueue(t.Context(), queue.Job[string]{Key: "d", Payload: "fail", MaxAttempts: 1}))
	s.ev.await(t, "dead-lettered", is(queue.EventDead, "d"))
	samples := eval[int](t, b, `Number(document.getElementById("chart").dataset.samples)`)
	waitJS(t, b, `Number(document.getElementById("chart").dataset.samples) >= `+strconv.Itoa(samples+5))
	assert.Equal(t, "0", eval[string](t, b, card("dead now")), "five polls later, the count is the last one")
	b.do(t, chromedp.Click(chromedp.ID("count-now")))
	waitJS(t, b, card("dead now")+` === "1"`)
	problems, _ := b.reported()
	assert.Empty(t, problems)
}
