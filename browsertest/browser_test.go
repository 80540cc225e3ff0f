package browsertest

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/dashboard"
)

// chromium returns the browser to drive: $CHROMIUM, or chromium (or
// chromium-browser) on PATH. Without one the test skips, or fails under
// CI=true, where scripts/test.sh installs it.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium not found under CI=true (scripts/test.sh installs it with apt-get)")
	}
	t.Skip("SKIP: chromium not installed (apt-get install chromium, or set CHROMIUM; CI=true installs it)")
	return ""
}

// browser is one headless Chromium with one tab, and what the tab
// reported: console errors, uncaught exceptions, error log entries (CSP
// violations among them) and dialogs (alert, confirm, prompt).
type browser struct {
	ctx context.Context

	// accept is the answer given to every dialog (confirm's OK); false
	// dismisses them.
	accept atomic.Bool

	mu       sync.Mutex
	problems []string
	dialogs  []string
}

// timeout bounds each test's use of the browser.
const timeout = 60 * time.Second

// The tests share one Chromium (it takes seconds to start), each in a
// tab of its own.
var shared struct {
	once   sync.Once
	ctx    context.Context // the browser's first tab; new tabs derive from it
	cancel func()
	dir    string // its profile
	err    error
}

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if shared.cancel != nil {
		shared.cancel()
	}
	if shared.dir != "" {
		_ = os.RemoveAll(shared.dir)
	}
	os.Exit(code)
}

func startBrowser(exe string) {
	shared.dir, shared.err = os.MkdirTemp("", "browsertest-chromium-")
	if shared.err != nil {
		return
	}
	// The defaults hold --headless and --disable-background-networking.
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.UserDataDir(shared.dir),
		chromedp.WindowSize(1280, 1000),
	)
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	shared.ctx, shared.cancel = ctx, func() { cancel(); acancel() }
	// The first Do starts the browser, which lives as long as ctx.
	shared.err = chromedp.Do(ctx)
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	exe := chromium(t)
	shared.once.Do(func() { startBrowser(exe) })
	require.NoError(t, shared.err, "starting %s", exe)
	ctx, cancel := chromedp.NewContext(shared.ctx) // a new tab
	t.Cleanup(cancel)
	b := &browser{ctx: ctx}
	require.NoError(t, chromedp.Do(ctx))
	require.NoError(t, chromedp.Listen(ctx, b.event))
	return b
}

func (b *browser) event(ev any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch ev := ev.(type) {
	case *runtime.EventConsoleAPICalled:
		if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeAssert {
			var args []string
			for _, a := range ev.Args {
				args = append(args, string(a.Value)+a.Description)
			}
			b.problems = append(b.problems, "console."+string(ev.Type)+": "+strings.Join(args, " "))
		}
	case *runtime.EventExceptionThrown:
		d := ev.ExceptionDetails
		desc := d.Text
		if d.Exception != nil {
			desc += " " + d.Exception.Description
		}
		b.problems = append(b.problems, fmt.Sprintf("exception at %s:%d: %s", d.URL, d.LineNumber, desc))
	case *log.EventEntryAdded:
		if ev.Entry.Level == log.EntryLevelError {
			b.problems = append(b.problems, "log: "+ev.Entry.Text+" "+ev.Entry.URL)
		}
	case *page.EventJavascriptDialogOpening:
		b.dialogs = append(b.dialogs, string(ev.Type)+": "+ev.Message)
		// Close it, or the page hangs; commands cannot run in a listener.
		accept := b.accept.Load()
		go func() {
			_, _ = chromedp.Call(b.ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: accept})
		}()
	}
}

func (b *browser) reported() (problems, dialogs []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.problems...), append([]string(nil), b.dialogs...)
}

// do runs steps with the test's deadline.
func (b *browser) do(t *testing.T, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, timeout)
	defer cancel()
	require.NoError(t, chromedp.Do(ctx, steps...))
}

// eval evaluates a JavaScript expression (awaiting a promise) and returns
// its value.
func eval[T any](t *testing.T, b *browser, expr string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, timeout)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	require.NoError(t, err, expr)
	return v
}

// waitJS waits, polling in the page, until a JavaScript expression is
// truthy.
func waitJS(t *testing.T, b *browser, expr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, timeout)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr,
		chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(timeout/2)))
	require.NoError(t, err, "waiting for %s", expr)
}

// eventually polls cond every 10 ms until it holds or the deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout / 2)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

// site is a queue with its dashboard mounted at /dashboard/ on a test
// server on 127.0.0.1, refreshing every 100 ms, with actions enabled.
type site struct {
	q   *queue.Queue[string]
	ev  *events
	srv *httptest.Server
	url string // the dashboard's URL, ending in a slash

	mu        sync.Mutex
	posts     []string // "path status" of every POST the dashboard answered
	deadLists int      // dead lists the dashboard served (GET api/jobs/dead)
}

// handle runs a job: a payload starting with "fail" fails; "slow:D" takes D.
func handle(ctx context.Context, j queue.Job[string]) error {
	switch {
	case strings.HasPrefix(j.Payload, "fail"):
		return fmt.Errorf("upstream said: %s", strings.TrimPrefix(j.Payload, "fail"))
	case strings.HasPrefix(j.Payload, "slow:"):
		d, _ := time.ParseDuration(strings.TrimPrefix(j.Payload, "slow:"))
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}
	return nil
}

// newSite serves the dashboard of a queue running handle, without the
// admin API.
func newSite(t *testing.T, opts ...queue.Option) *site {
	t.Helper()
	return startSite(t, handle, false, opts...)
}

// newAdminSite serves the dashboard of a queue running h, with the admin
// API plugged in (dashboard.WithAdmin): dead jobs, job detail, pause.
func newAdminSite(t *testing.T, h queue.Handler[string], opts ...queue.Option) *site {
	t.Helper()
	return startSite(t, h, true, opts...)
}

func startSite(t *testing.T, h queue.Handler[string], withAdmin bool, opts ...queue.Option) *site {
	t.Helper()
	rec := new(dashboard.Recorder)
	s := &site{ev: newEvents()}
	q, err := queue.New(h, append([]queue.Option{queue.WithName("browsertest"), queue.WithObserver(rec.Observe),
		queue.WithObserver(s.ev.observe), queue.WithRetry(1, 0, 0)}, opts...)...)
	require.NoError(t, err)
	s.q = q
	dopts := []dashboard.Option{dashboard.WithRecorder(rec), dashboard.WithActions(true),
		dashboard.WithInterval(100 * time.Millisecond)}
	if withAdmin {
		dopts = append(dopts, dashboard.WithAdmin(q.Admin())) // before Start, to track every run
	}
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, q.Start(ctx))
	dash, err := dashboard.New(q, dopts...)
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/dashboard/", http.StripPrefix("/dashboard", s.recordPosts(dash)))
	s.srv = httptest.NewServer(mux)
	s.url = s.srv.URL + "/dashboard/"
	t.Cleanup(func() {
		s.srv.Close()
		cancel()
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		_ = q.Shutdown(sctx)
	})
	return s
}

// events records a queue's events (queue.WithObserver) for a test to wait
// on, instead of sleeping.
type events struct {
	mu      sync.Mutex
	all     []queue.Event
	changed chan struct{} // closed, and replaced, on every event
}

func newEvents() *events { return &events{changed: make(chan struct{})} }

func (e *events) observe(ev queue.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.all = append(e.all, ev)
	close(e.changed)
	e.changed = make(chan struct{})
}

// find returns the first event seen that matches, and a channel closed
// at the next event.
func (e *events) find(match func(queue.Event) bool) (queue.Event, bool, <-chan struct{}) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, ev := range e.all {
		if match(ev) {
			return ev, true, nil
		}
	}
	return queue.Event{}, false, e.changed
}

// seen reports whether an event that matches has happened.
func (e *events) seen(match func(queue.Event) bool) bool {
	_, ok, _ := e.find(match)
	return ok
}

// await waits for an event that matches and returns it; it fails the test
// when none comes within the deadline, listing the events it saw.
func (e *events) await(t *testing.T, what string, match func(queue.Event) bool) queue.Event {
	t.Helper()
	deadline := time.NewTimer(timeout / 2)
	defer deadline.Stop()
	for {
		ev, ok, next := e.find(match)
		if ok {
			return ev
		}
		select {
		case <-next:
		case <-deadline.C:
			e.mu.Lock()
			var kinds []string
			for _, ev := range e.all {
				kinds = append(kinds, fmt.Sprintf("%s(job %d %q)", ev.Kind, ev.JobID, ev.Key))
			}
			e.mu.Unlock()
			t.Fatalf("timed out waiting for %s; events: %s", what, strings.Join(kinds, " "))
		}
	}
}

// is matches the event kind of the job with key.
func is(kind queue.EventKind, key string) func(queue.Event) bool {
	return func(ev queue.Event) bool { return ev.Kind == kind && ev.Key == key }
}

type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) { w.code = code; w.ResponseWriter.WriteHeader(code) }

func (s *site) recordPosts(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			next.ServeHTTP(w, r)
			if r.URL.Path == "/api/jobs/dead" {
				s.mu.Lock()
				s.deadLists++
				s.mu.Unlock()
			}
			return
		}
		sw := &statusWriter{ResponseWriter: w, code: 200}
		next.ServeHTTP(sw, r)
		s.mu.Lock()
		s.posts = append(s.posts, fmt.Sprintf("%s %d", r.URL.Path, sw.code))
		s.mu.Unlock()
	})
}

func (s *site) deadListsServed() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deadLists
}

func (s *site) postsSeen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.posts...)
}

// run enqueues jobs and waits until each has ended (done or dead).
func (s *site) run(t *testing.T, jobs ...queue.Job[string]) {
	t.Helper()
	before := s.q.Stats()
	for _, j := range jobs {
		require.NoError(t, s.q.Enqueue(context.Background(), j))
	}
	eventually(t, "jobs to end", func() bool {
		st := s.q.Stats()
		return st.Done+st.Dead >= before.Done+before.Dead+uint64(len(jobs))
	})
}

// open loads the dashboard and waits for its first render.
func (b *browser) open(t *testing.T, url string) {
	t.Helper()
	b.do(t, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS(`body[data-ready="true"]`)))
}

func contextWithTimeout(b *browser) (context.Context, context.CancelFunc) {
	return context.WithTimeout(b.ctx, timeout)
}
