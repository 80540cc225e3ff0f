package dashboard

import (
	"crypto/rand"
	"embed"
	"encoding/base64"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/admin"
)

//go:embed assets
var assets embed.FS

// Source is what the dashboard reads and acts on. A *queue.Queue[T]
// satisfies it for every T.
type Source interface {
	// Stats returns a snapshot of the queue; it must not block for long.
	Stats() queue.Stats
	// Target returns one target's health, and false if the queue has
	// never seen it.
	Target(name string) (queue.TargetStatus, bool)
	// Suspend suspends a target for d (the queue's default when d is 0).
	Suspend(target string, d time.Duration) error
	// Resume clears a target's suspension, disabled state and breaker.
	Resume(target string) error
	// Disable disables a target until Resume.
	Disable(target string, reason error) error
}

var _ Source = (*queue.Queue[struct{}])(nil)

// Handler serves the dashboard: the page, its script and style, and the
// JSON endpoints the page polls and posts to. Create it with New; it is
// safe for concurrent use.
type Handler struct {
	src      Source
	cfg      config
	token    string // the CSRF token every action must carry
	mux      *http.ServeMux
	crossOri *http.CrossOriginProtection

	mu   sync.Mutex
	ring ring        // samples for the chart
	cnt  stateCounts // the last count of jobs per state (counts.go)
	snap statsSnap   // the source's last Stats, when it is slow (counts.go)
}

type config struct {
	actions  bool
	recorder *Recorder
	jobs     *admin.Admin // WithAdmin
	runTimes bool         // jobs samples run times (admin.RunTimer), for the chart without a Recorder
	interval time.Duration
	history  int

	countsEvery time.Duration // WithCountsEvery
}

// Option configures a Handler.
type Option func(*config) error

// WithActions enables the page's actions: suspend, resume, disable and
// enable a target, and, with WithAdmin, retry and delete a dead job and
// pause and resume the queue.
// Default false: the dashboard is read-only, and every POST is refused
// with 403 Forbidden.
func WithActions(on bool) Option {
	return func(c *config) error { c.actions = on; return nil }
}

// WithRecorder gives the dashboard the Recorder it reads run times and
// target names from: it times runs for the chart's run time (latency),
// and lists healthy targets, which Stats leaves out. Default: when the
// Source is a RunSource (a *queue.Queue is), NewRecorder(src), which
// reads the queue's own counters and costs it no observer; otherwise
// none, and the chart's run time comes from the admin API's sample
// (WithAdmin, admin.Admin.RunTimes), or is left out without WithAdmin,
// and only the targets that are suspended, disabled or failing are
// listed. Give a zero Recorder fed by queue.WithObserver(r.Observe) for
// the exact mean and longest of every run, at the cost of an observer:
// an Event built and delivered for every enqueue, start and end of a job
// (see docs/benchmarks.md). Give each Handler a Recorder of its own: a
// poll takes the longest run since the previous one.
func WithRecorder(r *Recorder) Option {
	return func(c *config) error {
		if r == nil {
			return fmt.Errorf("dashboard: WithRecorder(nil): must not be nil")
		}
		c.recorder = r
		return nil
	}
}

// WithAdmin plugs in the queue's admin API (pass q.Admin()): the page
// lists dead jobs, with retry and delete when actions are enabled, shows
// one job's detail (never its payload) and the jobs per state, and shows
// whether the queue is paused, with pause and resume when actions are
// enabled. The chart's run time comes from the Recorder (WithRecorder),
// or else from the admin API's sample of run times
// (admin.Admin.RunTimes). Default nil: the page shows that these need the admin API,
// and the job endpoints answer 501 Not Implemented.
func WithAdmin(a *admin.Admin) Option {
	return func(c *config) error {
		if a == nil {
			return fmt.Errorf("dashboard: WithAdmin(nil): must not be nil")
		}
		c.jobs = a
		return nil
	}
}

// WithInterval sets how often the page refreshes, which is also the
// shortest gap between two samples of the chart (default 1 s; at least
// 50 ms).
func WithInterval(d time.Duration) Option {
	return func(c *config) error {
		if d < 50*time.Millisecond {
			return fmt.Errorf("dashboard: WithInterval(%s): must be at least 50ms", d)
		}
		c.interval = d
		return nil
	}
}

// WithHistory sets how many samples the chart keeps (default 300: five
// minutes at the default interval; 2 to 100000).
func WithHistory(n int) Option {
	return func(c *config) error {
		if n < 2 || n > 100000 {
			return fmt.Errorf("dashboard: WithHistory(%d): must be between 2 and 100000", n)
		}
		c.history = n
		return nil
	}
}

// WithCountsEvery sets how old the count of jobs per state the page
// shows (with WithAdmin) may grow before a poll starts a new one in the
// background (default 30 s; at least 1 s). The count reads every job of
// the queue on pgstore, so it is made once for every open tab and never
// on a poll's path: each poll answers with the last count and its age,
// which the page shows with a "count now" button (GET api/counts, which
// waits for a fresh count, at most one every 2 s). A retry or delete from
// the page makes the next poll recount.
func WithCountsEvery(d time.Duration) Option {
	return func(c *config) error {
		if d < time.Second {
			return fmt.Errorf("dashboard: WithCountsEvery(%s): must be at least 1s", d)
		}
		c.countsEvery = d
		return nil
	}
}

// New returns a dashboard of src. It reports an error naming the option
// at fault when an option's value is out of range.
func New(src Source, opts ...Option) (*Handler, error) {
	if src == nil {
		return nil, fmt.Errorf("dashboard: New: nil Source")
	}
	cfg := config{interval: time.Second, history: 300, countsEvery: 30 * time.Second}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	if cfg.recorder == nil {
		if rs, ok := src.(RunSource); ok {
			cfg.recorder = NewRecorder(rs) // the queue's counters: no observer
		}
	}
	if cfg.jobs != nil && cfg.recorder == nil {
		_, cfg.runTimes = cfg.jobs.RunTimes()
	}
	var b [32]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	h := &Handler{
		src:      src,
		cfg:      cfg,
		token:    base64.RawURLEncoding.EncodeToString(b[:]),
		crossOri: http.NewCrossOriginProtection(),
		ring:     ring{buf: make([]sample, 0, cfg.history)},
	}
	h.routes()
	return h, nil
}

func (h *Handler) routes() {
	m := http.NewServeMux()
	m.HandleFunc("GET /{$}", h.asset("assets/index.html", "text/html; charset=utf-8"))
	m.HandleFunc("GET /app.js", h.asset("assets/app.js", "text/javascript; charset=utf-8"))
	m.HandleFunc("GET /app.css", h.asset("assets/app.css", "text/css; charset=utf-8"))
	m.HandleFunc("GET /favicon.svg", h.asset("assets/favicon.svg", "image/svg+xml"))
	m.HandleFunc("GET /api/state", h.serveState)
	m.HandleFunc("POST /api/targets/{action}", h.action(h.targetAction))
	m.HandleFunc("GET /api/counts", h.serveCounts)
	m.HandleFunc("GET /api/jobs/dead", h.serveDead)
	m.HandleFunc("GET /api/jobs/{id}", h.serveJob)
	m.HandleFunc("POST /api/jobs/{id}/{action}", h.action(h.jobAction))
	m.HandleFunc("POST /api/queue/{action}", h.action(h.queueAction))
	h.mux = m
}

// csp allows the page's own script, style and requests and nothing else:
// no inline script or style, no other origin, no framing.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// ServeHTTP serves the page at "/", its assets, and the API under
// "/api/". Mount it with http.StripPrefix at a path that ends in a slash
// (see the package documentation). Every response forbids framing,
// sniffing and caching, and carries a Content-Security-Policy.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", csp)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("Cross-Origin-Opener-Policy", "same-origin")
	hd.Set("Cross-Origin-Resource-Policy", "same-origin")
	hd.Set("Cache-Control", "no-store")
	h.mux.ServeHTTP(w, r)
}

func (h *Handler) asset(name, ctype string) http.HandlerFunc {
	body, err := assets.ReadFile(name)
	if err != nil {
		panic("dashboard: missing embedded asset " + name) // a build error
	}
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", ctype)
		_, _ = w.Write(body)
	}
}
