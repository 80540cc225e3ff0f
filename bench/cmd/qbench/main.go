// Command qbench runs the side-by-side benchmarks of
// github.com/queuekit/queue against the libraries users would pick instead,
// and writes a markdown report with SVG charts.
//
// Usage:
//
//	go run ./cmd/qbench                  # the full in-process and scheduled comparison
//	go run ./cmd/qbench -durable         # ... plus river/pgstore and asynq/redisstore
//	go run -tags sqlitestore ./cmd/qbench -durable -systems river-sqlite,goqite,sqlitestore
//	                                     # sqlitestore beside river's SQLite driver and goqite
//	go run ./cmd/qbench -smoke           # every case with tiny N, in-process, for CI
//
// Each case runs in a child process (qbench re-executes itself) so that
// peak RSS is per case; -inprocess runs them all in this process instead.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/queuekit/queue/bench"
)

func main() {
	if len(os.Args) == 2 && os.Args[1] == bench.ChildFlag {
		if err := bench.ServeChild(); err != nil {
			fmt.Fprintln(os.Stderr, "qbench child:", err)
			os.Exit(1)
		}
		return
	}
	os.Exit(run())
}

func run() int {
	full := bench.FullConfig()
	dur := bench.DefaultDurable()
	var (
		smoke     = flag.Bool("smoke", false, "run every case with tiny N, 1 rep, in this process (for CI)")
		out       = flag.String("out", "results", "directory for throughput.svg, lateness.svg, results.json and (unless -md) report.md")
		from      = flag.String("from", "", "run nothing: rewrite the report from this results.json")
		merge     = flag.String("merge", "", "results.json of an earlier run: this run's tasks replace or join its tasks, and the report covers both")
		mdPath    = flag.String("md", "", "write the markdown report here instead of <out>/report.md (chart links are made relative to it)")
		inprocess = flag.Bool("inprocess", false, "run every case in this process (peak RSS is then not per case)")
		n         = flag.Int("n", full.N, "in-process jobs per run")
		reps      = flag.Int("reps", full.Reps, "timed runs per in-process case, after one warm-up")
		producers = flag.String("producers", ints(full.Producers), "producer counts")
		workers   = flag.String("workers", ints(full.Workers), "worker counts")
		capacity  = flag.Int("capacity", full.Capacity, "bare channel buffer and queue capacity")
		systems   = flag.String("systems", "", "comma-separated systems to run (default all)")
		schedN    = flag.Int("sched-n", full.SchedN, "jobs per lateness run")
		heldN     = flag.Int("held-n", full.HeldN, "jobs held an hour")
		rate      = flag.Float64("paced-rate", full.PacedRate, "jobs/s in the paced lateness run")
		verify    = flag.Bool("verify", false, "count every job in the handler and fail on a miscount (slower; -smoke implies it)")
		durable   = flag.Bool("durable", false, "also run the durable comparison (PostgreSQL and Redis on 127.0.0.1)")
		pgURL     = flag.String("pg", dur.PostgresURL, "PostgreSQL URL for the durable comparison")
		redisAddr = flag.String("redis", dur.RedisAddr, "Redis address used when -spawn-redis is off")
		redisDB   = flag.Int("redis-db", dur.RedisDB, "Redis database used when -spawn-redis is off")
		spawn     = flag.Bool("spawn-redis", true, "start private redis-server instances on 127.0.0.1 (persistence off, then AOF everysec)")
		burnN     = flag.Int("burn-n", dur.BurnN, "jobs per durable burn-down and batch insert")
		insertN   = flag.Int("insert-n", dur.InsertN, "jobs per durable single-insert case")
		burnLimit = flag.Duration("burn-limit", dur.BurnLimit, "cap on one durable burn-down")
		batchSize = flag.Int("batch-size", dur.BatchSize, "jobs per call in the durable batch insert's second case (0: none; the first inserts -burn-n in one call)")
		cases     = flag.String("cases", "", "comma-separated durable cases to run: insert, batch, burn, burn-defaults (default all)")
		sqlSync   = flag.String("sqlite-sync", "FULL", "comma-separated synchronous settings the SQLite systems run under, a pass each: FULL, NORMAL")
		sqlDir    = flag.String("sqlite-dir", "", "directory for the SQLite systems' files (default the system's temporary directory; it must be on the disk measured, not tmpfs)")
		sqlW      = flag.Int("sqlite-workers", dur.SQLiteWorkers, "workers in the SQLite burn-down (goqite: goroutines receiving)")
	)
	flag.Parse()

	cfg := full
	if *smoke {
		cfg = bench.SmokeConfig()
		*inprocess = true
	} else {
		cfg.N, cfg.Reps, cfg.Capacity = *n, *reps, *capacity
		cfg.SchedN, cfg.HeldN, cfg.PacedRate = *schedN, *heldN, *rate
		cfg.Verify = *verify
	}
	var err error
	if cfg.Producers, err = parseInts(*producers); err != nil {
		return usage(err)
	}
	if cfg.Workers, err = parseInts(*workers); err != nil {
		return usage(err)
	}
	if *systems != "" {
		cfg.Systems = strings.Split(*systems, ",")
	}
	if *durable {
		dur.PostgresURL, dur.RedisAddr, dur.RedisDB = *pgURL, *redisAddr, *redisDB
		dur.BurnN, dur.BatchN, dur.InsertN, dur.BurnLimit = *burnN, *burnN, *insertN, *burnLimit
		dur.BatchSize = *batchSize
		if *cases != "" {
			dur.Cases = strings.Split(*cases, ",")
		}
		dur.SQLiteSync, dur.SQLiteDir, dur.SQLiteWorkers = nil, *sqlDir, *sqlW
		for _, m := range strings.Split(*sqlSync, ",") {
			m = strings.ToUpper(strings.TrimSpace(m))
			if m != "FULL" && m != "NORMAL" {
				return usage(fmt.Errorf("-sqlite-sync: %q is not FULL or NORMAL", m))
			}
			dur.SQLiteSync = append(dur.SQLiteSync, m)
		}
		if *sqlW <= 0 {
			return usage(fmt.Errorf("-sqlite-workers: %d: must be at least 1", *sqlW))
		}
		if *spawn {
			if path, err := exec.LookPath(dur.RedisServer); err == nil {
				dur.SpawnRedis, dur.RedisServer = true, path
			} else {
				fmt.Fprintln(os.Stderr, "qbench: no redis-server in PATH; using", dur.RedisAddr, "with its persistence as found")
			}
		}
		if *smoke {
			dur.InsertN, dur.BatchN, dur.BurnN, dur.BurnLimit = 50, 200, 200, 5*time.Second
			dur.BatchSize = min(dur.BatchSize, 50)
		}
		cfg.Durable = &dur
	}

	if *from != "" {
		res, err := loadResults(*from)
		if err != nil {
			return usage(err)
		}
		if err := res.WriteReport(*out, *mdPath); err != nil {
			fmt.Fprintln(os.Stderr, "qbench:", err)
			return 1
		}
		return 0
	}

	r := bench.Runner{Stderr: os.Stderr}
	if !*inprocess {
		exe, err := os.Executable()
		if err != nil {
			return usage(err)
		}
		r.Exe = exe
	}
	start := time.Now()
	res := bench.Run(cfg, r, os.Stderr, "qbench "+strings.Join(os.Args[1:], " "))
	if *merge != "" {
		prev, err := loadResults(*merge)
		if err != nil {
			return usage(err)
		}
		prev.Merge(res)
		res = prev
	}
	if err := res.WriteReport(*out, *mdPath); err != nil {
		fmt.Fprintln(os.Stderr, "qbench:", err)
		return 1
	}
	if *mdPath == "" {
		*mdPath = filepath.Join(*out, "report.md")
	}
	fmt.Fprintf(os.Stderr, "qbench: wrote %s in %s\n", *mdPath, time.Since(start).Round(time.Second))
	if errs := res.Errors(); len(errs) > 0 {
		for _, e := range errs {
			fmt.Fprintln(os.Stderr, "qbench: failed:", e)
		}
		return 1
	}
	return 0
}

func loadResults(path string) (*bench.Results, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r bench.Results
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &r, nil
}

func usage(err error) int {
	fmt.Fprintln(os.Stderr, "qbench:", err)
	flag.Usage()
	return 2
}

func ints(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		x, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || x <= 0 {
			return nil, fmt.Errorf("bad count %q in %q", f, s)
		}
		out = append(out, x)
	}
	return out, nil
}
