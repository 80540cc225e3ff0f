package bench

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
)

// Config is one whole comparison run.
type Config struct {
	N         int   // in-process jobs per repetition
	Producers []int // producer counts
	Workers   []int // worker counts
	Capacity  int   // bare channel buffer and this library's capacity
	Reps      int   // timed repetitions after one warm-up
	Systems   []string

	SchedN       int           // jobs in a lateness run
	SchedSpread  time.Duration // delays are uniform in [0, SchedSpread)
	PacedRate    float64       // jobs/s in the paced lateness run
	SchedWorkers int
	HeldN        int // jobs held an hour

	// Durable, when set, runs the durable comparison as well.
	Durable *DurableConfig

	Verify bool   // count every job and fail on a miscount
	Seed   uint64 // seeds the scheduled delays
}

// FullConfig is the published comparison.
func FullConfig() Config {
	return Config{
		N: 1_000_000, Producers: []int{1, 4}, Workers: []int{2, 10, 20},
		Capacity: 1 << 16, Reps: 5,
		SchedN: 100_000, SchedSpread: 100 * time.Millisecond, PacedRate: 20_000, SchedWorkers: 10,
		HeldN: 1_000_000,
		Seed:  1,
	}
}

// SmokeConfig runs every case with tiny counts, for CI: it proves the
// bench builds and every contender runs, not how fast.
func SmokeConfig() Config {
	c := FullConfig()
	c.N, c.Reps = 2000, 1
	c.SchedN, c.SchedSpread, c.HeldN = 2000, 20*time.Millisecond, 2000
	c.Verify = true
	return c
}

// DefaultDurable is the durable comparison against this machine's
// PostgreSQL and Redis.
func DefaultDurable() DurableConfig {
	return DurableConfig{
		PostgresURL: "postgres://postgres@127.0.0.1:5432/test",
		PoolConns:   40,
		RedisAddr:   "127.0.0.1:6379", RedisDB: 11,
		RedisServer: "redis-server",
		InsertN:     10_000, Producers: []int{1, 10},
		BatchN: 100_000, BatchSize: 1000, BurnN: 100_000, BurnWorkers: []int{100, 1000},
		RedisConcurrency: 100,
		SQLiteWorkers:    100,
		BurnLimit:        30 * time.Second,
	}
}

// Results holds everything one run measured.
type Results struct {
	Config  Config
	Meta    Meta
	Inproc  []TaskResult
	Sched   []TaskResult // KindBurst, KindPaced and KindHeld
	Durable []TaskResult

	imageDir string // chart links' prefix, relative to the report
}

// Run executes cfg with r, logging progress to log.
func Run(cfg Config, r Runner, log io.Writer, command string) *Results {
	res := &Results{Config: cfg, Meta: CollectMeta(command)}
	start := time.Now()
	do := func(t Task) TaskResult {
		t0 := time.Now()
		tr := r.Do(t)
		status := "ok"
		if tr.Err != "" {
			status = "ERROR: " + tr.Err
		}
		fmt.Fprintf(log, "%-48s %7.2fs  %s\n", t.String(), time.Since(t0).Seconds(), status)
		return tr
	}
	want := func(name string) bool { return len(cfg.Systems) == 0 || slices.Contains(cfg.Systems, name) }

	for _, p := range cfg.Producers {
		for _, w := range cfg.Workers {
			for _, s := range InprocSystems() {
				if !want(s.Name) {
					continue
				}
				res.Inproc = append(res.Inproc, do(Task{Kind: KindInproc, System: s.Name, N: cfg.N, Producers: p, Workers: w, Capacity: cfg.Capacity, Reps: cfg.Reps, Verify: cfg.Verify}))
			}
		}
	}
	for _, kind := range []string{KindBurst, KindPaced, KindHeld} {
		for _, s := range SchedSystems() {
			if !want(s.Name) {
				continue
			}
			t := Task{Kind: kind, System: s.Name, N: cfg.SchedN, Workers: cfg.SchedWorkers, Capacity: cfg.Capacity, Spread: cfg.SchedSpread, Seed: cfg.Seed}
			if kind == KindPaced {
				t.Rate = cfg.PacedRate
			}
			if kind == KindHeld {
				t.N = cfg.HeldN
			}
			res.Sched = append(res.Sched, do(t))
		}
	}
	if cfg.Durable != nil {
		for _, s := range DurableSystems() {
			if !want(s.Name) {
				continue
			}
			d := *cfg.Durable
			res.Durable = append(res.Durable, do(Task{Kind: KindDurable, System: s.Name, Durable: &d}))
		}
	}
	res.Meta.Duration = time.Since(start)
	res.Meta.LoadEnd = LoadAvg()
	return res
}

// Merge folds later into r: each of later's tasks replaces r's task of the
// same kind, system, producers and workers, or is added. The report then
// lists later's command as a merged run.
func (r *Results) Merge(later *Results) {
	same := func(a, b Task) bool {
		return a.Kind == b.Kind && a.System == b.System && a.Producers == b.Producers && a.Workers == b.Workers
	}
	fold := func(dst, src []TaskResult) []TaskResult {
		for _, t := range src {
			i := slices.IndexFunc(dst, func(d TaskResult) bool { return same(d.Task, t.Task) })
			if i >= 0 {
				dst[i] = t
			} else {
				dst = append(dst, t)
			}
		}
		return dst
	}
	r.Inproc = fold(r.Inproc, later.Inproc)
	r.Sched = fold(r.Sched, later.Sched)
	r.Durable = fold(r.Durable, later.Durable)
	m := later.Meta
	line := fmt.Sprintf("`%s` on %s in %s (load %s → %s): %d task(s)",
		m.Command, m.Date.Format("2006-01-02 15:04 MST"), m.Duration.Round(time.Second), m.LoadStart, m.LoadEnd,
		len(later.Inproc)+len(later.Sched)+len(later.Durable))
	// The versions table shows what the newest build linked: a merged
	// run's tasks were measured with its modules (a river upgrade, say),
	// and the line says which of the reported versions it changed.
	if r.Meta.Versions == nil {
		r.Meta.Versions = map[string]string{}
	}
	if later.Config.Durable != nil {
		r.Config.Durable = later.Config.Durable
	}
	before := maps.Clone(r.Meta.Versions)
	maps.Copy(r.Meta.Versions, m.Versions)
	var changed []string
	for _, k := range r.reportedModules() {
		if old, v := before[k], r.Meta.Versions[k]; old != "" && old != v {
			changed = append(changed, fmt.Sprintf("%s %s → %s", k, old, v))
		}
	}
	if len(changed) > 0 {
		line += "; built with " + strings.Join(changed, ", ")
	}
	r.Meta.Merged = append(r.Meta.Merged, line)
}

// Errors lists every task that failed.
func (r *Results) Errors() []string {
	var errs []string
	for _, group := range [][]TaskResult{r.Inproc, r.Sched, r.Durable} {
		for _, t := range group {
			if t.Err != "" {
				errs = append(errs, t.Task.String()+": "+t.Err)
			}
		}
	}
	return errs
}
