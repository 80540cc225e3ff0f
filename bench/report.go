package bench

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"
)

// InprocSummary condenses one in-process case's repetitions.
type InprocSummary struct {
	System           string
	P, W, N, Reps    int
	Median, Min, Max float64 // jobs per second
	NsPerJob         float64 // at the median run
	AllocsPerJob     float64 // median
	RetriesPerJob    float64 // median ErrQueueFull retries
	PeakRSSMiB       float64
	Child            bool
	Err              string
}

// Summaries condenses the in-process results, in run order.
func (r *Results) Summaries() []InprocSummary {
	var out []InprocSummary
	for _, t := range r.Inproc {
		s := InprocSummary{System: t.Task.System, P: t.Task.Producers, W: t.Task.Workers, N: t.Task.N, Reps: len(t.Reps),
			PeakRSSMiB: float64(t.PeakRSSKiB) / 1024, Child: t.Child, Err: t.Err}
		var rates, allocs, retries []float64
		for _, rep := range t.Reps {
			rates = append(rates, float64(t.Task.N)/rep.Elapsed.Seconds())
			allocs = append(allocs, float64(rep.Mallocs)/float64(t.Task.N))
			retries = append(retries, float64(rep.Retries)/float64(t.Task.N))
		}
		if len(rates) > 0 {
			s.Median = median(rates)
			s.Min, s.Max = minMax(rates)
			s.NsPerJob = 1e9 / s.Median
			s.AllocsPerJob = median(allocs)
			s.RetriesPerJob = median(retries)
		}
		out = append(out, s)
	}
	return out
}

func (r *Results) summary(system string, p, w int) (InprocSummary, bool) {
	for _, s := range r.Summaries() {
		if s.System == system && s.P == p && s.W == w && s.Err == "" && s.Median > 0 {
			return s, true
		}
	}
	return InprocSummary{}, false
}

func (r *Results) sched(kind, system string) (TaskResult, bool) {
	for _, t := range r.Sched {
		if t.Task.Kind == kind && t.Task.System == system && t.Err == "" {
			return t, true
		}
	}
	return TaskResult{}, false
}

// headline is the configuration the charts and headline ratios use.
const headlineP, headlineW = 1, 10

// KeepMarker is the line after which a report's markdown is written by
// hand: WriteReport keeps it, and everything after it, when it rewrites a
// report that has it.
const KeepMarker = "<!-- qbench: the sections below are written by hand and kept when qbench rewrites this file -->"

// WriteReport writes throughput.svg, lateness.svg and results.json to dir,
// and the markdown report to mdPath (dir/report.md when mdPath is ""),
// linking the charts by their path relative to the report. If mdPath
// already holds KeepMarker, the marker and what follows it are kept after
// the new report.
func (r *Results) WriteReport(dir, mdPath string) error {
	if mdPath == "" {
		mdPath = filepath.Join(dir, "report.md")
	}
	for _, d := range []string{dir, filepath.Dir(mdPath)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	raw, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	r.imageDir, err = relDir(filepath.Dir(mdPath), dir)
	if err != nil {
		return err
	}
	md := r.Markdown()
	old, err := os.ReadFile(mdPath)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if i := bytes.Index(old, []byte(KeepMarker)); i >= 0 {
		md = strings.TrimRight(md, "\n") + "\n\n" + string(old[i:])
	}
	files := map[string]string{
		filepath.Join(dir, "throughput.svg"): r.ThroughputChart().SVG(),
		filepath.Join(dir, "lateness.svg"):   r.LatenessChart().SVG(),
		filepath.Join(dir, "results.json"):   string(raw) + "\n",
		mdPath:                               md,
	}
	for name, body := range files {
		if err := os.WriteFile(name, []byte(body), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// relDir returns dir relative to base, as a URL path prefix ("" or
// "bench/").
func relDir(base, dir string) (string, error) {
	ab, err := filepath.Abs(base)
	if err != nil {
		return "", err
	}
	ad, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	rel, err := filepath.Rel(ab, ad)
	if err != nil || rel == "." {
		return "", err
	}
	return filepath.ToSlash(rel) + "/", nil
}

// ThroughputChart is jobs/s by system at W = 10, P = 1, with min–max
// whiskers.
func (r *Results) ThroughputChart() chart {
	c := chart{
		Title:    fmt.Sprintf("In-process throughput, %s no-op jobs, %d producer, %d workers", count(r.Config.N), headlineP, headlineW),
		Subtitle: fmt.Sprintf("median of %d run%s, whiskers min–max; %s", r.Config.Reps, plural(r.Config.Reps), r.machineLine()),
		Unit:     "jobs per second (higher is better)",
		Format:   rate,
	}
	for _, s := range r.Summaries() {
		if s.P != headlineP || s.W != headlineW || s.Median == 0 {
			continue
		}
		b := bar{Value: s.Median}
		if s.Reps > 1 {
			b.Lo, b.Hi = s.Min, s.Max
		}
		c.Groups = append(c.Groups, barGroup{Label: s.System, Highlight: isOurs(s.System), Bars: []bar{b}})
	}
	return c
}

// LatenessChart is the p50/p90/p99 lateness of each scheduled-path system,
// burst and paced, on a log axis.
func (r *Results) LatenessChart() chart {
	c := chart{
		Title:    fmt.Sprintf("Scheduled-job lateness (start − due), %s jobs, delays uniform in [0, %s)", count(r.Config.SchedN), r.Config.SchedSpread),
		Subtitle: fmt.Sprintf("burst: all scheduled at once; paced: %s jobs/s; log scale; %s", count(int(r.Config.PacedRate)), r.machineLine()),
		Unit:     "lateness (lower is better; log scale)",
		Series:   []string{"p50", "p90", "p99", "max"},
		Log:      true,
		Format:   func(v float64) string { return dur(time.Duration(v)) },
	}
	for _, kind := range []string{KindBurst, KindPaced} {
		for _, s := range SchedSystems() {
			t, ok := r.sched(kind, s.Name)
			if !ok || t.Lateness == nil {
				continue
			}
			l := t.Lateness
			g := barGroup{Label: s.Name + " · " + kind, Highlight: isOurs(s.Name)}
			for i, v := range []time.Duration{l.P50, l.P90, l.P99, l.Max} {
				g.Bars = append(g.Bars, bar{Series: i, Value: math.Max(float64(v), 1000)})
			}
			c.Groups = append(c.Groups, g)
		}
	}
	return c
}

func isOurs(system string) bool {
	return system == "queue" || strings.HasPrefix(system, "queue+") || system == "pgstore" || system == "redisstore" || system == "sqlitestore"
}

func (r *Results) machineLine() string {
	line := fmt.Sprintf("%s CPUs, %s, %s", r.Meta.NProc, r.Meta.CPUModel, r.Meta.GoVersion)
	if f := strings.Fields(r.Meta.LoadStart); len(f) > 0 {
		line += ", load " + f[0] + " at start"
	}
	return line
}

// Markdown renders the report.
func (r *Results) Markdown() string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	m := r.Meta
	w("# queue benchmarks: side by side\n\n")
	w("Generated by `qbench` on %s in %s. Every number below comes from this one run on this one machine", m.Date.Format("2006-01-02 15:04 MST"), m.Duration.Round(time.Second))
	if len(m.Merged) > 0 {
		w(", except the tasks of the later runs listed under the command")
	}
	w(".\n\n")
	r.writeMachine(w)
	r.writeTargets(w)
	r.writeInproc(w)
	r.writeSched(w)
	r.writeDurable(w)
	if errs := r.Errors(); len(errs) > 0 {
		w("## Errors\n\n")
		for _, e := range errs {
			w("- %s\n", e)
		}
		w("\n")
	}
	return b.String()
}

type writer func(format string, args ...any)

// reportedModules lists, sorted, the modules whose versions the report
// shows: the core and those of the systems compared.
func (r *Results) reportedModules() []string {
	mods := map[string]bool{coreModule: true}
	for _, s := range InprocSystems() {
		mods[s.Module] = true
	}
	for _, s := range SchedSystems() {
		mods[s.Module] = true
	}
	if r.Config.Durable != nil {
		for _, k := range []string{"github.com/riverqueue/river", "github.com/hibiken/asynq", "github.com/jackc/pgx/v5", "github.com/redis/go-redis/v9",
			coreModule + "/pgstore", coreModule + "/redisstore", coreModule + "/sqlitestore",
			"github.com/riverqueue/river/riverdriver/riversqlite", "maragu.dev/goqite", "modernc.org/sqlite"} {
			mods[k] = r.Meta.Versions[k] != ""
		}
	}
	var names []string
	for k, on := range mods {
		if k != "" && on {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	return names
}

func (r *Results) writeMachine(w writer) {
	m := r.Meta
	w("## Machine, versions, command\n\n")
	w("| | |\n|---|---|\n")
	w("| CPU | %s |\n", m.CPUModel)
	w("| `nproc` | %s (runtime.NumCPU %d, GOMAXPROCS %d) |\n", m.NProc, m.NumCPU, m.GOMAXPROCS)
	w("| Go | %s %s |\n", m.GoVersion, m.OSArch)
	w("| load average (1, 5, 15 min) | %s at the start, %s at the end (%s CPUs; other work on the machine lowers every number, the within-run ratios less so) |\n", m.LoadStart, m.LoadEnd, m.NProc)
	for _, k := range r.reportedModules() {
		v := m.Versions[k]
		if v == "" {
			v = "(main module)"
		}
		w("| %s | %s |\n", k, v)
	}
	w("\nCommand:\n\n```\n%s\n```\n\n", m.Command)
	if len(m.Merged) > 0 {
		w("Tasks from later runs on the same machine were merged in, replacing the same tasks of the run above:\n\n")
		for _, x := range m.Merged {
			w("- %s\n", x)
		}
		w("\n")
	}
}

type target struct {
	what     string
	measured string
	met      bool
	known    bool
}

func (r *Results) targets() []target {
	var ts []target
	ratio := func(what, a, b string, want float64) {
		sa, oka := r.summary(a, headlineP, headlineW)
		sb, okb := r.summary(b, headlineP, headlineW)
		t := target{what: what, known: oka && okb}
		if t.known {
			x := sa.Median / sb.Median
			t.measured = fmt.Sprintf("%.2f× (%s vs %s)", x, rate(sa.Median), rate(sb.Median))
			t.met = x >= want
			if lo, hi, ok := r.ratioRange(a, b); ok {
				t.measured += fmt.Sprintf("; %.2f×–%.2f× over all P, W", lo, hi)
			}
		}
		ts = append(ts, t)
	}
	ratio("queue, no key ≥ 0.6× bare channel (P=1, W=10)", "queue", "channel", 0.6)
	ratio("queue, no key ≥ 1.3× pond (P=1, W=10)", "queue", "pond", 1.3)
	ratio("queue with keys ≥ 2.5× workqueue (P=1, W=10)", "queue+keys", "workqueue", 2.5)
	late := func(what, kind string, limit time.Duration) {
		t := target{what: what}
		if tr, ok := r.sched(kind, "queue"); ok && tr.Lateness != nil {
			t.known, t.met = true, tr.Lateness.P99 <= limit
			t.measured = "p99 " + dur(tr.Lateness.P99)
			if wq, ok := r.sched(kind, "workqueue"); ok && wq.Lateness != nil {
				t.measured += " (workqueue " + dur(wq.Lateness.P99) + ")"
			}
		}
		ts = append(ts, t)
	}
	late("burst-scheduling p99 lateness ≤ 5 ms", KindBurst, 5*time.Millisecond)
	late("paced-scheduling p99 lateness ≤ 1.2 ms", KindPaced, 1200*time.Microsecond)
	held, okq := r.sched(KindHeld, "queue")
	t := target{what: "≤ 128 B heap per held scheduled job"}
	if okq && held.Held != nil {
		t.known, t.met = true, held.Held.HeapPerJob <= 128
		t.measured = fmt.Sprintf("%.0f B/job", held.Held.HeapPerJob)
	}
	ts = append(ts, t)
	t = target{what: "schedule rate ≥ 2× workqueue's AddAfter"}
	if wq, ok := r.sched(KindHeld, "workqueue"); ok && okq && held.Held != nil && wq.Held != nil {
		x := held.Held.Rate / wq.Held.Rate
		t.known, t.met = true, x >= 2
		t.measured = fmt.Sprintf("%.2f× (%s vs %s)", x, rate(held.Held.Rate), rate(wq.Held.Rate))
	}
	ts = append(ts, t)
	return append(ts, r.durableTargets()...)
}

// ratioRange is the smallest and largest a/b over every P, W measured.
func (r *Results) ratioRange(a, b string) (lo, hi float64, ok bool) {
	lo = math.Inf(1)
	for _, p := range r.Config.Producers {
		for _, w := range r.Config.Workers {
			sa, oka := r.summary(a, p, w)
			sb, okb := r.summary(b, p, w)
			if !oka || !okb {
				continue
			}
			x := sa.Median / sb.Median
			lo, hi, ok = math.Min(lo, x), math.Max(hi, x), true
		}
	}
	return lo, hi, ok
}

func (r *Results) writeTargets(w writer) {
	w("## Targets\n\n")
	w("Ratios are taken within this run. Where a target is missed, the table says so.\n\n")
	w("| target | measured | met |\n|---|---|---|\n")
	for _, t := range r.targets() {
		met := "not measured"
		if t.known {
			met = "**no**"
			if t.met {
				met = "yes"
			}
		} else {
			t.measured = "—"
		}
		w("| %s | %s | %s |\n", t.what, t.measured, met)
	}
	w("\n![in-process throughput](%sthroughput.svg)\n\n", r.imageDir)
}

func (r *Results) writeInproc(w writer) {
	c := r.Config
	w("## In-process throughput\n\n")
	w("%s no-op jobs per run (payload: the job's index, an int), %d timed runs per case after one warm-up run; jobs/s is the median, with the min–max over the runs. ", count(c.N), c.Reps)
	w("A run is timed from the first submit to the end of the system's own drain (close + wait, StopAndWait, StopWait, ReleaseTimeout, ShutDown, Stop); building the system is not timed. ")
	w("allocs/job is runtime.MemStats.Mallocs over the run ÷ N. ")
	if r.childRun() {
		w("Each case ran in a process of its own (qbench re-executes itself), so peak RSS (VmHWM) is that case's, warm-up included. ")
	} else {
		w("All cases ran in one process, so peak RSS (VmHWM) is the process's peak so far, not per case. ")
	}
	w("The bare channel's buffer and this library's capacity are both %s; when the library returns ErrQueueFull the producer yields (runtime.Gosched) and retries, counted as retries/job. ", count(c.Capacity))
	w("Dedupe cases (workqueue, queue+keys) get the same N distinct string keys, built before timing; they are included in those cases' RSS.\n\n")
	w("| system | configuration |\n|---|---|\n")
	for _, s := range InprocSystems() {
		w("| %s | %s |\n", s.Name, s.Note)
	}
	w("\n")
	for _, p := range c.Producers {
		w("### %d producer%s\n\n", p, plural(p))
		w("| system | W | jobs/s (median) | min–max | ns/job | allocs/job | retries/job | peak RSS |\n|---|--:|--:|--:|--:|--:|--:|--:|\n")
		for _, s := range r.Summaries() {
			if s.P != p {
				continue
			}
			if s.Err != "" {
				w("| %s | %d | error: %s | | | | | |\n", s.System, s.W, s.Err)
				continue
			}
			retries := "—"
			if s.System == "queue" || s.System == "queue+keys" {
				retries = fmt.Sprintf("%.2f", s.RetriesPerJob)
			}
			name := s.System
			if isOurs(name) {
				name = "**" + name + "**"
			}
			w("| %s | %d | %s | %s–%s | %.1f | %.2f | %s | %.0f MiB |\n", name, s.W, rate(s.Median), rate(s.Min), rate(s.Max), s.NsPerJob, s.AllocsPerJob, retries, s.PeakRSSMiB)
		}
		w("\n")
	}
	w("### Ratios in every configuration\n\n| P | W | queue ÷ channel | queue ÷ pond | queue+keys ÷ workqueue |\n|--:|--:|--:|--:|--:|\n")
	for _, p := range c.Producers {
		for _, wk := range c.Workers {
			w("| %d | %d | %s | %s | %s |\n", p, wk, r.ratio("queue", "channel", p, wk), r.ratio("queue", "pond", p, wk), r.ratio("queue+keys", "workqueue", p, wk))
		}
	}
	w("\n")
}

func (r *Results) ratio(a, b string, p, w int) string {
	sa, oka := r.summary(a, p, w)
	sb, okb := r.summary(b, p, w)
	if !oka || !okb {
		return "—"
	}
	return fmt.Sprintf("%.2f×", sa.Median/sb.Median)
}

func (r *Results) childRun() bool {
	for _, t := range r.Inproc {
		if t.Child {
			return true
		}
	}
	return false
}

func (r *Results) writeSched(w writer) {
	c := r.Config
	w("## Scheduled path\n\n")
	w("| system | configuration |\n|---|---|\n")
	for _, s := range SchedSystems() {
		w("| %s | %s |\n", s.Name, s.Note)
	}
	w("\n### Lateness\n\n")
	w("%s jobs with delays uniform in [0, %s) (fixed seed), scheduled in a burst (as fast as the system accepts them) and paced at %s jobs/s; %d workers where the system has workers. Lateness is the job's start (read in the handler) minus its due time (the clock read just before scheduling it, plus its delay). A small warm-up burst runs first.\n\n",
		count(c.SchedN), c.SchedSpread, count(int(c.PacedRate)), c.SchedWorkers)
	w("| system | mode | p50 | p90 | p99 | max | min | early | time to schedule all |\n|---|---|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, kind := range []string{KindBurst, KindPaced} {
		for _, s := range SchedSystems() {
			t, ok := r.find(r.Sched, kind, s.Name)
			if !ok {
				continue
			}
			if t.Err != "" || t.Lateness == nil {
				w("| %s | %s | error: %s | | | | | | |\n", s.Name, kind, t.Err)
				continue
			}
			l := t.Lateness
			w("| %s | %s | %s | %s | %s | %s | %s | %d | %s |\n", bold(s.Name), kind, dur(l.P50), dur(l.P90), dur(l.P99), dur(l.Max), dur(l.Min), l.Early, dur(l.EnqueueTime))
		}
	}
	w("\n![scheduled-job lateness](%slateness.svg)\n\n", r.imageDir)
	w("### Held for an hour\n\n%s jobs scheduled one hour out from one goroutine: the schedule rate, and the heap they hold (runtime.MemStats.HeapAlloc after a GC, before and after, ÷ N; int payload, no key).\n\n", count(c.HeldN))
	w("| system | schedule rate | heap/job | allocs/job | peak RSS |\n|---|--:|--:|--:|--:|\n")
	for _, s := range SchedSystems() {
		t, ok := r.find(r.Sched, KindHeld, s.Name)
		if !ok {
			continue
		}
		if t.Err != "" || t.Held == nil {
			w("| %s | error: %s | | | |\n", s.Name, t.Err)
			continue
		}
		h := t.Held
		w("| %s | %s | %.0f B | %.2f | %.0f MiB |\n", bold(s.Name), rate(h.Rate), h.HeapPerJob, h.MallocsJob, float64(t.PeakRSSKiB)/1024)
	}
	w("\n")
}

func (r *Results) find(ts []TaskResult, kind, system string) (TaskResult, bool) {
	for _, t := range ts {
		if t.Task.Kind == kind && t.Task.System == system {
			return t, true
		}
	}
	return TaskResult{}, false
}

// sqliteSystems are the durable contenders on SQLite.
var sqliteSystems = []string{"river-sqlite", "goqite", "sqlitestore"}

// ranSQLite reports whether a SQLite contender ran.
func (r *Results) ranSQLite() bool {
	return slices.ContainsFunc(r.Durable, func(t TaskResult) bool { return slices.Contains(sqliteSystems, t.Task.System) })
}

func (r *Results) durableRows() []DurableResult {
	var rows []DurableResult
	for _, t := range r.Durable {
		rows = append(rows, t.Durable...)
	}
	return rows
}

func (r *Results) writeDurable(w writer) {
	w("## Durable engines\n\n")
	d := r.Config.Durable
	if d == nil {
		w("Not run in this pass (qbench -durable runs it against the local PostgreSQL and Redis).\n\n")
		return
	}
	w("PostgreSQL: `%s`, each system in a schema of its own (dropped and recreated), pgx pool of %d connections. ", d.PostgresURL, d.PoolConns)
	if d.SpawnRedis {
		w("Redis: a private `redis-server` on a free 127.0.0.1 port per persistence mode (off: `--appendonly no --save \"\"`; AOF: `--appendonly yes --appendfsync everysec`), both systems on the same one. ")
	} else {
		w("Redis: `%s` db %d, persistence as found. ", d.RedisAddr, d.RedisDB)
	}
	w("insert: %s jobs one at a time from 1 and 10 goroutines; batch insert: %s jobs in one call; burn-down: %s queued no-op jobs worked off, timed from starting the workers until river's Client.Stop or pgstore's Queue.Stop returns (so every job's completion is committed), and on Redis until the last job's handler returned (asynq's Shutdown takes most of a second whatever the work; both asynq and redisstore record a job's end before its worker takes the next), capped at %s.\n\n", count(d.InsertN), count(d.BatchN), count(d.BurnN), d.BurnLimit)
	if r.ranSQLite() {
		w("SQLite: every system on new files (one per case) in WAL mode with the synchronous setting its rows name, a 5 s busy timeout, through one driver (modernc.org/sqlite); river on `riversqlite` with one connection (its advice against `SQLITE_BUSY`) and its benchmark fetch settings; goqite driven by %d goroutines that `Receive` and `Delete` (polling every 1 ms when empty; it has no batch API); sqlitestore with its defaults (one writer goroutine, group commit). insert and batch insert as above (river's `InsertMany`); burn-down with %d workers, timed until river's Client.Stop or sqlitestore's Queue.Stop returns, or goqite's last `Delete`, capped at %s.\n\n", d.SQLiteWorkers, d.SQLiteWorkers, d.BurnLimit)
	}
	var missing []string
	ran := map[string]bool{}
	for _, t := range r.Durable {
		ran[t.Task.System] = true
	}
	for _, n := range DurablePlanned {
		if !ran[n] {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		w("Not measured: %s — not in this build of the bench (build qbench with `-tags pgstore,redisstore,sqlitestore` to include this library's stores and the SQLite peers).\n\n", strings.Join(missing, ", "))
	}
	w("| system | case | setting | jobs | time | jobs/s | note |\n|---|---|---|--:|--:|--:|---|\n")
	for _, row := range r.durableRows() {
		w("| %s | %s | %s | %s | %s | %s | %s |\n", bold(row.System), row.Case, row.Setting, count(row.Jobs), dur(row.Elapsed), rate(row.Rate), row.Note)
	}
	for _, t := range r.Durable {
		if t.Err != "" {
			w("| %s | error | | | | | %s |\n", t.Task.System, t.Err)
		}
	}
	w("\n")
}

// durableTargets compares each store with its peer at equal settings.
func (r *Results) durableTargets() []target {
	rows := r.durableRows()
	get := func(system, kase, setting string) (DurableResult, bool) {
		for _, x := range rows {
			if x.System == system && x.Case == kase && settingIs(x.Setting, setting) {
				return x, true
			}
		}
		return DurableResult{}, false
	}
	var ts []target
	cmp := func(what, ours, peer, kase, oursSetting, peerSetting string, want float64) {
		o, ok1 := get(ours, kase, oursSetting)
		p, ok2 := get(peer, kase, peerSetting)
		t := target{what: what, known: ok1 && ok2}
		if t.known {
			x := o.Rate / p.Rate
			t.met = x >= want
			t.measured = fmt.Sprintf("%.2f× (%s vs %s)", x, rate(o.Rate), rate(p.Rate))
		}
		ts = append(ts, t)
	}
	for _, wk := range r.durableWorkers() {
		s := fmt.Sprintf("workers=%d", wk)
		cmp(fmt.Sprintf("pgstore burn-down ≥ 2× river, %d workers (river at 2 ms cooldown; issue #35)", wk), "pgstore", "river", "burn-down", s, s+", cooldown 2ms / poll 20ms", 2)
	}
	cmp("pgstore batch insert ≥ river's COPY (InsertManyFast)", "pgstore", "river", "batch insert", "", "InsertManyFast", 1.0)
	if d := r.Config.Durable; d != nil && d.inCalls() {
		cmp(fmt.Sprintf("pgstore EnqueueMany ≥ 1.5× river's COPY (InsertManyFast), batches of %s (issue #35)", count(d.BatchSize)), "pgstore", "river", "batch insert",
			batchSetting("EnqueueMany", d.BatchSize), batchSetting("InsertManyFast (COPY)", d.BatchSize), 1.5)
	}
	for _, mode := range []string{"FULL", "NORMAL"} {
		suffix := "synchronous " + mode
		if r.Config.Durable == nil || !slices.ContainsFunc(rows, func(x DurableResult) bool { return strings.HasSuffix(x.Setting, suffix) }) {
			continue
		}
		w := fmt.Sprintf("workers=%d", r.Config.Durable.SQLiteWorkers)
		o, ok1 := findBoth(rows, "sqlitestore", "burn-down", w, suffix)
		p, ok2 := findSuffix(rows, "river-sqlite", "burn-down", suffix)
		ts = append(ts, ratioTarget("sqlitestore burn-down ≥ 3× river-sqlite ("+suffix+"; issue #34)", o, p, ok1 && ok2, 3))
		p, ok2 = findSuffix(rows, "goqite", "burn-down", suffix)
		ts = append(ts, ratioTarget("sqlitestore burn-down ≥ goqite ("+suffix+"; issue #34)", o, p, ok1 && ok2, 1))
		if pg, ok := get("pgstore", "burn-down", w); ok {
			ts = append(ts, ratioTarget("sqlitestore burn-down ≥ 0.5× pgstore ("+suffix+" against pgstore's "+w+"; issue #34)", o, pg, ok1, 0.5))
		}
		o, ok1 = findBoth(rows, "sqlitestore", "insert", "producers=1", suffix)
		p, ok2 = findBoth(rows, "river-sqlite", "insert", "producers=1", suffix)
		ts = append(ts, ratioTarget("sqlitestore one producer, one job per call ≥ 2× river-sqlite ("+suffix+"; issue #34)", o, p, ok1 && ok2, 2))
		if d := r.Config.Durable; d.inCalls() {
			o, ok1 = findBoth(rows, "sqlitestore", "batch insert", batchSetting("EnqueueMany", d.BatchSize), suffix)
			t := target{what: fmt.Sprintf("sqlitestore EnqueueMany, batches of %s ≥ 100 000 jobs/s (%s; issue #34)", count(d.BatchSize), suffix), known: ok1}
			if ok1 {
				t.met = o.Rate >= 100_000
				t.measured = rate(o.Rate)
			}
			ts = append(ts, t)
		}
	}
	for _, mode := range []string{"off", "aof-everysec", "as found"} {
		suffix := "persistence " + mode
		if !slices.ContainsFunc(rows, func(x DurableResult) bool { return strings.HasSuffix(x.Setting, suffix) }) {
			continue
		}
		o, ok1 := findSuffix(rows, "redisstore", "burn-down", suffix)
		p, ok2 := findSuffix(rows, "asynq", "burn-down", suffix)
		ts = append(ts, ratioTarget("redisstore burn-down ≥ 1.5× asynq ("+suffix+")", o, p, ok1 && ok2, 1.5))
		// One producer enqueuing one job at a time waits a round trip per
		// job, as asynq's does: its target is 1.2× asynq's rate on the
		// same Redis (issue 35) (scripts/redisbench.sh sets both beside redis-benchmark's
		// PING; docs/benchmarks.md, "Redis: one producer", says why PING
		// is not the target). A batch goes in one round trip per call:
		// EnqueueMany against asynq's one producer.
		o, ok1 = findSetting(rows, "redisstore", "insert", "producers=1, "+suffix)
		p, ok2 = findSetting(rows, "asynq", "insert", "producers=1, "+suffix)
		ts = append(ts, ratioTarget("redisstore enqueue one at a time, 1 producer ≥ 1.2× asynq's (issue #35), one round trip per job ("+suffix+"; replaces ≥ 0.9× `redis-benchmark -c 1 PING`; rounds interleaved with asynq and PING under \"Redis: one producer\" and \"Issue 35 item 1\" below)", o, p, ok1 && ok2, 1.2))
		o, ok1 = findSuffix(rows, "redisstore", "batch insert", suffix)
		p, ok2 = findSetting(rows, "asynq", "insert", "producers=1, "+suffix)
		ts = append(ts, ratioTarget("redisstore batch insert (EnqueueMany) ≥ 5× asynq's enqueue, 1 producer ("+suffix+")", o, p, ok1 && ok2, 5))
	}
	return ts
}

func (r *Results) durableWorkers() []int {
	if r.Config.Durable == nil {
		return nil
	}
	return r.Config.Durable.BurnWorkers
}

func findSuffix(rows []DurableResult, system, kase, suffix string) (DurableResult, bool) {
	for _, x := range rows {
		if x.System == system && x.Case == kase && strings.HasSuffix(x.Setting, suffix) {
			return x, true
		}
	}
	return DurableResult{}, false
}

// findBoth finds the row of system and kase whose setting is prefix (see
// settingIs) and ends in suffix.
func findBoth(rows []DurableResult, system, kase, prefix, suffix string) (DurableResult, bool) {
	for _, x := range rows {
		if x.System == system && x.Case == kase && settingIs(x.Setting, prefix) && strings.HasSuffix(x.Setting, suffix) {
			return x, true
		}
	}
	return DurableResult{}, false
}

func findSetting(rows []DurableResult, system, kase, setting string) (DurableResult, bool) {
	for _, x := range rows {
		if x.System == system && x.Case == kase && x.Setting == setting {
			return x, true
		}
	}
	return DurableResult{}, false
}

func ratioTarget(what string, o, p DurableResult, known bool, want float64) target {
	t := target{what: what, known: known}
	if known {
		x := o.Rate / p.Rate
		t.met = x >= want
		t.measured = fmt.Sprintf("%.2f× (%s vs %s)", x, rate(o.Rate), rate(p.Rate))
	}
	return t
}

func bold(system string) string {
	if isOurs(system) {
		return "**" + system + "**"
	}
	return system
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// rate formats a per-second rate: 21.3 M/s, 850 k/s, 412/s.
func rate(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2f M/s", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1f k/s", v/1e3)
	default:
		return fmt.Sprintf("%.0f/s", v)
	}
}

// count formats a count with thin grouping: 1 000 000.
func count(n int) string {
	s := fmt.Sprint(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteRune(' ')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// dur formats a duration with three significant figures.
func dur(d time.Duration) string {
	a := d
	if a < 0 {
		a = -a
	}
	switch {
	case a >= time.Second:
		return fmt.Sprintf("%.3g s", d.Seconds())
	case a >= time.Millisecond:
		return fmt.Sprintf("%.3g ms", float64(d)/1e6)
	case a >= time.Microsecond:
		return fmt.Sprintf("%.3g µs", float64(d)/1e3)
	default:
		return fmt.Sprintf("%d ns", d)
	}
}

// settingIs reports whether setting is want or starts with it followed by
// a separator, so that "workers=100" does not match "workers=1000".
func settingIs(setting, want string) bool {
	if want == "" || setting == want {
		return true
	}
	rest, ok := strings.CutPrefix(setting, want)
	return ok && (rest[0] == ',' || rest[0] == ' ')
}
