package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/admin"
	"github.com/queuekit/queue/pgstore"
	"github.com/queuekit/queue/redisstore"
	"github.com/queuekit/queue/sqlitestore"
	"github.com/queuekit/queue/storekit"
)

// backend is an opened durable store: its admin API and its Stats.
type backend struct {
	kind  string // "postgres", "redis" or "sqlite"
	where string // the schema or prefix, as said in messages
	store storekit.Store[json.RawMessage]
	adm   *admin.Admin
	close func()
}

// checkTarget validates the global flags naming the store.
func (c *cli) checkTarget() error {
	g := c.g
	switch {
	case g.pg == "" && g.redis == "" && g.sqlite == "":
		return usagef("no store: give --pg URL, --redis ADDR or --sqlite FILE")
	case countSet(g.pg, g.redis, g.sqlite) > 1:
		return usagef("more than one of --pg, --redis and --sqlite given: queuectl works on one store")
	case g.sqlite != "" && (c.set["prefix"] || g.schema != ""):
		return usagef("--prefix and --schema are not for --sqlite: a file holds its queues by name")
	case g.pg != "" && c.set["prefix"]:
		return usagef("--prefix is for --redis; PostgreSQL takes --schema")
	case g.redis != "" && g.schema != "":
		return usagef("--schema is for --pg; Redis takes --prefix")
	case g.queue == "":
		return usagef("--queue: empty name")
	case g.timeout <= 0:
		return usagef("--timeout %s: must be > 0", g.timeout)
	}
	if g.schema != "" {
		// New fails on its options before it looks at the pool.
		var oe *queue.OptionError
		if _, err := pgstore.New[json.RawMessage](nil, pgstore.WithSchema(g.schema)); errors.As(err, &oe) && oe.Option == "pgstore.WithSchema" {
			return usagef("--schema %q: %s", g.schema, oe.Reason)
		}
	}
	_, err := c.priorityConfig()
	return err
}

// priorityConfig parses --priorities into the queue's levels.
func (c *cli) priorityConfig() (storekit.Config, error) {
	cfg := storekit.Config{Name: c.g.queue}
	seen := map[string]bool{}
	for _, part := range strings.Split(c.g.priorities, ",") {
		name, w, ok := strings.Cut(strings.TrimSpace(part), "=")
		weight, err := strconv.Atoi(w)
		if !ok || name == "" || err != nil || seen[name] {
			return cfg, usagef("--priorities %q: want distinct name=weight levels separated by commas, highest first (e.g. high=0,normal=5,low=10)", c.g.priorities)
		}
		seen[name] = true
		cfg.Priorities = append(cfg.Priorities, queue.Priority{Name: name, Weight: weight})
	}
	cfg.DefaultPriority = cfg.Priorities[0].Name
	if seen["normal"] {
		cfg.DefaultPriority = "normal"
	}
	return cfg, nil
}

// open connects to the store named by the global flags, checks that it
// holds the queue, and returns its admin API.
func (c *cli) open() (*backend, error) {
	if err := c.checkTarget(); err != nil {
		return nil, err
	}
	switch {
	case c.g.pg != "":
		return c.openPG()
	case c.g.sqlite != "":
		return c.openSQLite()
	}
	return c.openRedis()
}

// dial opens a pool on --pg and pings the server.
func (c *cli) dial() (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(c.g.pg)
	if err != nil {
		return nil, usagef("--pg: bad URL: %v", pgURLError(err))
	}
	cfg.MaxConns = 4
	cfg.ConnConfig.ConnectTimeout = c.g.timeout
	pool, err := pgxpool.NewWithConfig(c.ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("--pg: %v", err)
	}
	ctx, cancel := context.WithTimeout(c.ctx, c.g.timeout)
	defer cancel()
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("cannot reach PostgreSQL at %s:%d (database %q): %v", cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database, err)
	}
	return pool, nil
}

// pgURLError is pgx's parse error without the URL it quotes (which may
// hold a password).
func pgURLError(err error) string {
	msg := err.Error()
	if _, after, ok := strings.Cut(msg, "`: "); ok {
		return after
	}
	return msg
}

func (c *cli) pgOptions() []pgstore.Option {
	if c.g.schema == "" {
		return nil
	}
	return []pgstore.Option{pgstore.WithSchema(c.g.schema)}
}

func (c *cli) openPG() (*backend, error) {
	opts := c.pgOptions()
	pool, err := c.dial()
	if err != nil {
		return nil, err
	}
	b, err := c.pgBackend(pool, opts)
	if err != nil {
		pool.Close()
		return nil, err
	}
	return b, nil
}

func (c *cli) pgBackend(pool *pgxpool.Pool, opts []pgstore.Option) (*backend, error) {
	ctx, cancel := context.WithTimeout(c.ctx, c.g.timeout)
	defer cancel()
	schema, err := c.checkMigrated(ctx, pool)
	if err != nil {
		return nil, err
	}
	store, err := pgstore.New[json.RawMessage](pool, opts...)
	if err != nil {
		return nil, err
	}
	cfg, _ := c.priorityConfig()
	if err := store.Init(cfg); err != nil { // checks the queue's name
		return nil, err
	}
	where := fmt.Sprintf("schema %q", schema)
	if err := c.pgQueueKnown(ctx, pool, where); err != nil {
		return nil, err
	}
	b := &backend{kind: "postgres", where: where, store: store, close: func() {
		_ = store.Close(context.WithoutCancel(c.ctx))
		pool.Close()
	}}
	b.adm = admin.New(store.Admin())
	return b, nil
}

// tables returns the quoted names of pgstore's jobs, leaders, queues and
// migrations tables in --schema.
func (c *cli) tables() (jobs, leaders, queues, migrations string) {
	id := func(t string) string {
		if c.g.schema == "" {
			return pgx.Identifier{t}.Sanitize()
		}
		return pgx.Identifier{c.g.schema, t}.Sanitize()
	}
	return id("queuekit_jobs"), id("queuekit_leaders"), id("queuekit_queues"), id("queuekit_migrations")
}

// checkMigrated fails, naming queuectl migrate, when the schema lacks
// pgstore's tables or records an older migration than pgstore has. It
// returns the schema's name.
func (c *cli) checkMigrated(ctx context.Context, pool *pgxpool.Pool) (string, error) {
	jobs, leaders, queues, migrations := c.tables()
	var (
		current                        *string
		hasJobs, hasLeaders, hasQueues bool
		hasMigrations                  bool
	)
	err := pool.QueryRow(ctx, `SELECT current_schema(), to_regclass($1) IS NOT NULL, to_regclass($2) IS NOT NULL,
		to_regclass($3) IS NOT NULL, to_regclass($4) IS NOT NULL`,
		jobs, leaders, queues, migrations).Scan(&current, &hasJobs, &hasLeaders, &hasQueues, &hasMigrations)
	if err != nil {
		return "", fmt.Errorf("checking the schema: %v", err)
	}
	schema := c.g.schema
	if schema == "" && current != nil {
		schema = *current
	}
	fix := "run queuectl --pg URL" + c.schemaFlag() + " migrate"
	if !hasJobs || !hasLeaders {
		return schema, fmt.Errorf("schema %q is not migrated (no table queuekit_jobs): %s", schema, fix)
	}
	if !hasMigrations {
		// Migrated with another tool from the same files: no versions
		// to compare, but the admin API needs the queues table.
		if !hasQueues {
			return schema, fmt.Errorf("schema %q lacks the table queuekit_queues of pgstore's migration 003 (admin): %s", schema, fix)
		}
		return schema, nil
	}
	var version int
	if err := pool.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM "+migrations).Scan(&version); err != nil {
		return schema, fmt.Errorf("checking the schema's migrations: %v", err)
	}
	if want := latestMigration(); version < want {
		return schema, fmt.Errorf("schema %q is at migration %d, this queuectl needs %d: %s", schema, version, want, fix)
	}
	return schema, nil
}

func (c *cli) schemaFlag() string {
	if c.g.schema == "" {
		return ""
	}
	return " --schema " + c.g.schema
}

func latestMigration() int {
	ms := pgstore.Migrations()
	return ms[len(ms)-1].Version
}

// pgQueueKnown fails when the schema holds no sign of the queue: no job
// in any state (within retention), no leader row and no control row (a
// queue once paused has one). Each test reads one
// of the jobs table's partial indexes, so a missing queue costs no scan.
func (c *cli) pgQueueKnown(ctx context.Context, pool *pgxpool.Pool, where string) error {
	jobs, leaders, queues, _ := c.tables()
	q := `SELECT EXISTS (SELECT 1 FROM {jobs} WHERE queue = $1 AND state = 'available')
		OR EXISTS (SELECT 1 FROM {jobs} WHERE queue = $1 AND state IN ('scheduled', 'retryable'))
		OR EXISTS (SELECT 1 FROM {jobs} WHERE queue = $1 AND lease_expires_at IS NOT NULL)
		OR EXISTS (SELECT 1 FROM {jobs} WHERE queue = $1 AND state IN ('completed', 'dead', 'cancelled'))
		OR EXISTS (SELECT 1 FROM {jobs} WHERE queue = $1 AND key <> '' AND state = 'pending')
		OR EXISTS (SELECT 1 FROM {jobs} WHERE queue = $1 AND state = 'running')
		OR EXISTS (SELECT 1 FROM {leaders} WHERE queue = $1)
		OR EXISTS (SELECT 1 FROM {queues} WHERE queue = $1)`
	q = strings.NewReplacer("{jobs}", jobs, "{leaders}", leaders, "{queues}", queues).Replace(q)
	var known bool
	if err := pool.QueryRow(ctx, q, c.g.queue).Scan(&known); err != nil {
		return fmt.Errorf("looking for queue %q: %v", c.g.queue, err)
	}
	if !known {
		return fmt.Errorf("queue %q not found in %s: it has no jobs and no running process (check --queue%s)", c.g.queue, where, map[bool]string{true: " and --schema", false: ""}[c.g.schema != ""])
	}
	return nil
}

// redisOptions parses --redis: host:port, or a redis:// or rediss:// URL.
func (c *cli) redisOptions() (*redis.Options, error) {
	addr := c.g.redis
	if strings.Contains(addr, "://") {
		o, err := redis.ParseURL(addr)
		if err != nil {
			return nil, usagef("--redis: bad URL: %v", err)
		}
		return o, nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, usagef("--redis %q: bad address: want host:port or redis://host:port/db", addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
		return nil, usagef("--redis %q: bad port %q", addr, port)
	}
	return &redis.Options{Addr: net.JoinHostPort(host, port)}, nil
}

func (c *cli) openRedis() (*backend, error) {
	ro, err := c.redisOptions()
	if err != nil {
		return nil, err
	}
	ro.DialTimeout = c.g.timeout
	ro.MaxRetries = -1 // one try: an unreachable server is reported at once
	client := redis.NewClient(ro)
	b, err := c.redisBackend(client, ro.Addr)
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	return b, nil
}

func (c *cli) redisBackend(client *redis.Client, addr string) (*backend, error) {
	ctx, cancel := context.WithTimeout(c.ctx, c.g.timeout)
	defer cancel()
	// New checks its options, then pings.
	store, err := redisstore.New[json.RawMessage](client, redisstore.WithPrefix(c.g.prefix),
		redisstore.WithFallback(0), redisstore.WithConnect(c.g.timeout, false))
	var oe *queue.OptionError
	switch {
	case errors.As(err, &oe) && oe.Option == "redisstore.WithPrefix":
		return nil, usagef("--prefix %q: %s", c.g.prefix, oe.Reason)
	case err != nil:
		return nil, fmt.Errorf("cannot reach Redis at %s: %v", addr, errors.Unwrap(err))
	}
	cfg, _ := c.priorityConfig()
	if err := store.Init(cfg); err != nil { // checks the queue's name
		return nil, err
	}
	where := fmt.Sprintf("prefix %q", c.g.prefix)
	// Every queue that ever held a job keeps its ID sequence; jobs and
	// dead letters live in meta and dead.
	tag := "{" + c.g.prefix + ":" + c.g.queue + "}:"
	n, err := client.Exists(ctx, tag+"ids", tag+"meta", tag+"dead").Result()
	if err != nil {
		return nil, fmt.Errorf("looking for queue %q: %v", c.g.queue, err)
	}
	if n == 0 {
		return nil, fmt.Errorf("queue %q not found under %s: Redis holds no %s* keys (check --queue and --prefix)", c.g.queue, where, tag)
	}
	b := &backend{kind: "redis", where: where, store: store, close: func() {
		_ = store.Close(context.WithoutCancel(c.ctx))
		_ = client.Close()
	}}
	b.adm = adminOf(store)
	return b, nil
}

// adminOf returns the admin API over s, or nil when s does not offer
// one (an Admin method returning its admin.Store, as pgstore's).
func adminOf(s any) *admin.Admin {
	switch s := s.(type) {
	case interface{ Admin() admin.Store }:
		return admin.New(s.Admin())
	case admin.Store:
		return admin.New(s)
	}
	return nil
}

// errNoAdmin says that the store lacks the admin methods.
var errNoAdmin = errors.New("not supported by this store yet")

// withAdmin opens the store and calls f with its admin API.
func (c *cli) withAdmin(cmd string, f func(b *backend) error) error {
	b, err := c.open()
	if err != nil {
		return err
	}
	defer b.close()
	if b.adm == nil {
		return fmt.Errorf("%s: %w (%s)", cmd, errNoAdmin, b.kind)
	}
	return f(b)
}

// countSet counts the flags given (not empty).
func countSet(vals ...string) int {
	n := 0
	for _, v := range vals {
		if v != "" {
			n++
		}
	}
	return n
}

// openSQLite opens the --sqlite file, checks that it is migrated and
// holds the queue, and returns its admin API.
func (c *cli) openSQLite() (*backend, error) {
	if _, err := os.Stat(c.g.sqlite); err != nil {
		return nil, fmt.Errorf("--sqlite %s: %v", c.g.sqlite, err)
	}
	db, err := sqlitestore.Open(c.g.sqlite)
	if err != nil {
		return nil, err
	}
	b, err := c.sqliteBackend(db)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	return b, nil
}

func (c *cli) sqliteBackend(db *sqlitestore.DB) (*backend, error) {
	ctx, cancel := context.WithTimeout(c.ctx, c.g.timeout)
	defer cancel()
	var migrated int
	if err := db.SQL().QueryRowContext(ctx, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'queuekit_jobs'").Scan(&migrated); err != nil {
		return nil, fmt.Errorf("--sqlite %s: %v", c.g.sqlite, err)
	}
	if migrated == 0 {
		return nil, fmt.Errorf("--sqlite %s holds no queuekit tables: not a sqlitestore database, or not migrated (sqlitestore.Migrate)", c.g.sqlite)
	}
	store, err := sqlitestore.New[json.RawMessage](db)
	if err != nil {
		return nil, err
	}
	cfg, _ := c.priorityConfig()
	if err := store.Init(cfg); err != nil { // checks the queue's name
		return nil, err
	}
	where := fmt.Sprintf("file %s", c.g.sqlite)
	var n int
	if err := db.SQL().QueryRowContext(ctx, `SELECT (SELECT count(*) FROM (SELECT 1 FROM queuekit_jobs WHERE queue = ? LIMIT 1))
		+ (SELECT count(*) FROM queuekit_queues WHERE queue = ?)`, c.g.queue, c.g.queue).Scan(&n); err != nil {
		return nil, fmt.Errorf("looking for queue %q: %v", c.g.queue, err)
	}
	if n == 0 {
		return nil, fmt.Errorf("queue %q not found in %s: it holds no job of that queue (check --queue)", c.g.queue, where)
	}
	b := &backend{kind: "sqlite", where: where, store: store, close: func() {
		_ = store.Close(context.WithoutCancel(c.ctx))
		_ = db.Close()
	}}
	b.adm = admin.New(store.Admin())
	return b, nil
}
