package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// DurableConfig configures the durable comparison: river against pgstore
// on one PostgreSQL database, asynq against redisstore on one Redis, and
// river's SQLite driver and goqite against sqlitestore, each on a new
// SQLite file of its own.
type DurableConfig struct {
	// PostgresURL is the database both river and pgstore use, each under
	// a schema of its own that the bench drops and recreates.
	PostgresURL string
	// PoolConns is the pgx pool size on both PostgreSQL sides.
	PoolConns int
	// RedisAddr and RedisDB name the Redis used when SpawnRedis is off,
	// with its persistence as found.
	RedisAddr string
	RedisDB   int
	// SpawnRedis starts a private redis-server on 127.0.0.1 for each
	// persistence mode (off, then AOF everysec) from RedisServer, so that
	// the modes are set without touching a shared server.
	SpawnRedis  bool
	RedisServer string

	InsertN   int   // jobs per single-insert / enqueue case
	Producers []int // goroutines inserting one job at a time
	BatchN    int   // jobs in the batch-insert case
	// BatchSize, when above 0 and below BatchN, adds a batch-insert case
	// of BatchN jobs inserted in calls of BatchSize jobs each.
	BatchSize   int
	BurnN       int   // jobs in a burn-down
	BurnWorkers []int // PostgreSQL burn-down workers
	// RedisConcurrency is the worker count of the Redis burn-down.
	RedisConcurrency int
	// SQLiteWorkers is the worker count of the SQLite burn-down (goqite:
	// goroutines receiving and deleting).
	SQLiteWorkers int
	// SQLiteSync lists the synchronous settings ("FULL", "NORMAL") the
	// SQLite systems run under, each a pass of its own; FULL alone when
	// empty.
	SQLiteSync []string
	// SQLiteDir is where the SQLite files go, a new directory under it per
	// pass (os.TempDir when empty).
	SQLiteDir string
	// BurnLimit caps one burn-down's time; a capped run reports the rate
	// it reached and how many jobs it finished.
	BurnLimit time.Duration
	// Cases, when not empty, are the only cases run: "insert", "batch",
	// "burn", and "burn-defaults" (river's burn-downs at its default
	// fetch settings, the slowest cases of the comparison).
	Cases []string
}

// batchSizes returns the batch-insert case's call sizes: 0, all BatchN
// jobs in one call, then BatchSize when it is in effect (above 0 and
// below BatchN).
func (c DurableConfig) batchSizes() []int {
	if c.inCalls() {
		return []int{0, c.BatchSize}
	}
	return []int{0}
}

// inCalls reports whether BatchSize adds a case of BatchN jobs inserted
// in calls of BatchSize jobs each.
func (c DurableConfig) inCalls() bool { return c.BatchSize > 0 && c.BatchSize < c.BatchN }

// Runs reports whether the case named kase (see Cases) is to be run.
func (c DurableConfig) Runs(kase string) bool {
	return len(c.Cases) == 0 || slices.Contains(c.Cases, kase)
}

// chunked calls insert for n jobs in calls of size jobs (all at once when
// size is 0) and times it.
func chunked(n, size int, insert func(n int) error) (time.Duration, error) {
	if size <= 0 {
		size = n
	}
	start := time.Now()
	for left := n; left > 0; left -= size {
		if err := insert(min(size, left)); err != nil {
			return time.Since(start), err
		}
	}
	return time.Since(start), nil
}

// batchSetting is the batch-insert setting name with its batch size, if
// any.
func batchSetting(name string, size int) string {
	if size <= 0 {
		return name
	}
	return fmt.Sprintf("%s, batches of %s", name, count(size))
}

// DurableResult is one durable measurement.
type DurableResult struct {
	System  string // river, pgstore, asynq, redisstore, river-sqlite, goqite, sqlitestore
	Case    string // "insert", "batch insert", "burn-down"
	Setting string // e.g. "goroutines=10", "workers=100, cooldown 2ms / poll 20ms"
	Jobs    int    // jobs the case finished
	Elapsed time.Duration
	Rate    float64 // jobs per second
	Note    string  `json:",omitempty"`
}

func durableResult(system, kase, setting string, jobs int, elapsed time.Duration) DurableResult {
	return DurableResult{System: system, Case: kase, Setting: setting, Jobs: jobs, Elapsed: elapsed, Rate: float64(jobs) / elapsed.Seconds()}
}

// DurableSystem is one contender in the durable comparison.
type DurableSystem struct {
	Name   string
	Engine string // "postgres", "redis" or "sqlite"
	Module string
	Run    func(ctx context.Context, cfg DurableConfig, env DurableEnv) ([]DurableResult, error)
}

// DurableEnv is the server a durable suite runs against.
type DurableEnv struct {
	PostgresURL string
	Schema      string // PostgreSQL schema for this system alone
	RedisAddr   string
	RedisDB     int
	Persistence string // Redis persistence: "off", "aof-everysec" or "as found"
	// SQLiteDir is an empty directory for this system's SQLite files, and
	// SQLiteSync their synchronous setting, "FULL" or "NORMAL".
	SQLiteDir  string
	SQLiteSync string
}

var sqliteFiles atomic.Int64

// SQLiteFile returns the path of a new SQLite file in env.SQLiteDir, named
// after name; every call gives another.
func (env DurableEnv) SQLiteFile(name string) string {
	return filepath.Join(env.SQLiteDir, fmt.Sprintf("%s-%d.db", name, sqliteFiles.Add(1)))
}

var (
	durableMu      sync.Mutex
	durableSystems = map[string]DurableSystem{}
)

// RegisterDurable adds a durable contender. river and asynq register
// themselves, and river-sqlite and goqite when built with -tags
// sqlitestore; the pgstore, redisstore and sqlitestore sides register
// through RegisterStore.
func RegisterDurable(s DurableSystem) {
	durableMu.Lock()
	defer durableMu.Unlock()
	durableSystems[s.Name] = s
}

// DurableSystems returns the registered durable contenders, PostgreSQL
// first, then Redis, then SQLite, peers before this library.
func DurableSystems() []DurableSystem {
	durableMu.Lock()
	defer durableMu.Unlock()
	order := map[string]int{"river": 0, "pgstore": 1, "asynq": 2, "redisstore": 3, "river-sqlite": 4, "goqite": 5, "sqlitestore": 6}
	var out []DurableSystem
	for _, s := range durableSystems {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool {
		oi, iok := order[out[i].Name]
		oj, jok := order[out[j].Name]
		if iok != jok {
			return iok
		}
		if oi != oj {
			return oi < oj
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// DurablePlanned lists the durable contenders the comparison is built for,
// registered or not, so the report can say which are missing.
var DurablePlanned = []string{"river", "pgstore", "asynq", "redisstore", "river-sqlite", "goqite", "sqlitestore"}

// RunDurable runs the named durable contender's suite in this process.
func RunDurable(name string, cfg DurableConfig) ([]DurableResult, error) {
	durableMu.Lock()
	sys, ok := durableSystems[name]
	durableMu.Unlock()
	if !ok {
		return nil, fmt.Errorf("durable system %q is not registered", name)
	}
	ctx := context.Background()
	if sys.Engine == "postgres" {
		env := DurableEnv{PostgresURL: cfg.PostgresURL, Schema: "qbench_" + name}
		return sys.Run(ctx, cfg, env)
	}
	if sys.Engine == "sqlite" {
		return runSQLite(ctx, sys, cfg)
	}
	var all []DurableResult
	for _, mode := range redisModes(cfg) {
		env, stop, err := redisEnv(ctx, cfg, mode)
		if err != nil {
			return all, fmt.Errorf("redis (%s): %w", mode, err)
		}
		res, err := sys.Run(ctx, cfg, env)
		stop()
		for i := range res {
			res[i].Setting = joinSetting(res[i].Setting, "persistence "+env.Persistence)
		}
		all = append(all, res...)
		if err != nil {
			return all, fmt.Errorf("redis (%s): %w", mode, err)
		}
	}
	return all, nil
}

// runSQLite runs sys once per synchronous setting of cfg, each pass on
// new files in a directory of its own, removed afterwards.
func runSQLite(ctx context.Context, sys DurableSystem, cfg DurableConfig) ([]DurableResult, error) {
	var all []DurableResult
	for _, mode := range sqliteModes(cfg) {
		if mode != "FULL" && mode != "NORMAL" {
			return all, fmt.Errorf("sqlite synchronous setting %q: want FULL or NORMAL", mode)
		}
		dir, err := os.MkdirTemp(cfg.SQLiteDir, "qbench-"+sys.Name+"-")
		if err != nil {
			return all, err
		}
		env := DurableEnv{SQLiteDir: dir, SQLiteSync: mode}
		res, err := sys.Run(ctx, cfg, env)
		os.RemoveAll(dir)
		for i := range res {
			res[i].Setting = joinSetting(res[i].Setting, "synchronous "+mode)
		}
		all = append(all, res...)
		if err != nil {
			return all, fmt.Errorf("sqlite (synchronous %s): %w", mode, err)
		}
	}
	return all, nil
}

// sqliteModes returns the synchronous settings the SQLite systems run
// under, checked.
func sqliteModes(cfg DurableConfig) []string {
	if len(cfg.SQLiteSync) == 0 {
		return []string{"FULL"}
	}
	return cfg.SQLiteSync
}

// joinSetting appends b to the setting a, either of which may be empty.
func joinSetting(a, b string) string {
	if a == "" || b == "" {
		return a + b
	}
	return a + ", " + b
}

func redisModes(cfg DurableConfig) []string {
	if cfg.SpawnRedis {
		return []string{"off", "aof-everysec"}
	}
	return []string{"as found"}
}

// redisEnv returns a Redis for one persistence mode: a private server on a
// free 127.0.0.1 port when cfg.SpawnRedis is set, else cfg.RedisAddr.
func redisEnv(ctx context.Context, cfg DurableConfig, mode string) (DurableEnv, func(), error) {
	if !cfg.SpawnRedis {
		return DurableEnv{RedisAddr: cfg.RedisAddr, RedisDB: cfg.RedisDB, Persistence: mode}, func() {}, nil
	}
	port, err := freePort()
	if err != nil {
		return DurableEnv{}, nil, err
	}
	dir, err := os.MkdirTemp("", "qbench-redis-")
	if err != nil {
		return DurableEnv{}, nil, err
	}
	args := []string{"--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "", "--dir", dir, "--daemonize", "no", "--logfile", ""}
	if mode == "aof-everysec" {
		args = append(args, "--appendonly", "yes", "--appendfsync", "everysec")
	} else {
		args = append(args, "--appendonly", "no")
	}
	cmd := exec.Command(cfg.RedisServer, args...)
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return DurableEnv{}, nil, err
	}
	stop := func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		os.RemoveAll(dir)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	deadline := time.Now().Add(10 * time.Second)
	for rdb.Ping(ctx).Err() != nil {
		if time.Now().After(deadline) {
			stop()
			return DurableEnv{}, nil, errors.New("spawned redis-server did not answer PING")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return DurableEnv{RedisAddr: addr, RedisDB: 0, Persistence: mode}, stop, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// insertConcurrently calls insert n times from g goroutines and times it.
func insertConcurrently(ctx context.Context, n, g int, insert func(ctx context.Context) error) (time.Duration, error) {
	var (
		wg       sync.WaitGroup
		left     atomic.Int64
		firstErr error
		errOnce  sync.Once
	)
	left.Store(int64(n))
	start := time.Now()
	for range g {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				if err := insert(ctx); err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start), firstErr
}

// burnCounter counts finished jobs and says when n have finished.
type burnCounter struct {
	n    int64
	done atomic.Int64
	all  chan struct{}
}

func newBurnCounter(n int) *burnCounter {
	return &burnCounter{n: int64(n), all: make(chan struct{})}
}

func (b *burnCounter) inc() {
	if b.done.Add(1) == b.n {
		close(b.all)
	}
}

// wait returns when n jobs finished or limit passed, with how many did.
func (b *burnCounter) wait(limit time.Duration) (int, bool) {
	select {
	case <-b.all:
		return int(b.n), true
	case <-time.After(limit):
		return int(b.done.Load()), false
	}
}
