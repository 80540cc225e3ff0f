package main

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/queuekit/queue/pgstore"
	"github.com/stretchr/testify/require"
)

// requireFails checks that r exited with code and one stderr line
// containing each of want.
func requireFails(t *testing.T, r result, code int, want ...string) {
	t.Helper()
	require.Equal(t, code, r.code, "exit code; stderr: %s", r.stderr)
	require.Equal(t, 1, strings.Count(r.stderr, "queuectl: "), "one message: %q", r.stderr)
	for _, w := range want {
		require.Contains(t, r.stderr, w)
	}
}

// TestUsageErrors: mistakes on the command line exit 2 with a message
// naming the mistake, before any server is contacted (the addresses here
// lead nowhere).
func TestUsageErrors(t *testing.T) {
	pg := "--pg=postgres://u@127.0.0.1:1/db"
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no command", []string{pg}, "no command"},
		{"unknown command", []string{pg, "frob"}, `unknown command "frob"`},
		{"unknown global flag", []string{"--frob", "stats"}, "flag provided but not defined: -frob"},
		{"unknown command flag", []string{pg, "ls", "--state", "dead", "--frob"}, "ls: flag provided but not defined: -frob"},
		{"no store", []string{"stats"}, "no store: give --pg URL, --redis ADDR or --sqlite FILE"},
		{"two stores", []string{pg, "--redis", "127.0.0.1:1", "stats"}, "more than one of --pg, --redis and --sqlite given"},
		{"schema with redis", []string{"--redis", "127.0.0.1:1", "--schema", "s", "stats"}, "--schema is for --pg"},
		{"prefix with pg", []string{pg, "--prefix", "p", "stats"}, "--prefix is for --redis"},
		{"bad schema", []string{pg, "--schema", "a-b", "stats"}, `--schema "a-b"`},
		{"bad prefix", []string{"--redis", "127.0.0.1:1", "--prefix", "a{b", "stats"}, ""},
		{"bad priorities", []string{pg, "--priorities", "high,low", "stats"}, `--priorities "high,low"`},
		{"empty queue", []string{pg, "--queue", "", "stats"}, "--queue: empty name"},
		{"bad ID", []string{pg, "show", "abc"}, `show: bad job ID "abc": want a positive integer`},
		{"negative ID", []string{pg, "rm", "-1"}, `rm: bad job ID "-1": want a positive integer`},
		{"zero ID", []string{pg, "cancel", "0"}, `cancel: bad job ID "0"`},
		{"two IDs", []string{pg, "rm", "1", "2"}, "rm: want one job ID, got 2 arguments"},
		{"no ID", []string{pg, "retry"}, "retry: want one job ID, got 0 arguments"},
		{"ls without state", []string{pg, "ls"}, "ls: --state is required: one of ready, scheduled"},
		{"ls bad state", []string{pg, "ls", "--state", "zombie"}, `ls: --state "zombie": want one of`},
		{"ls bad priority", []string{pg, "ls", "--state", "dead", "--priority", "urgent"}, `ls: --priority "urgent": not one of the queue's levels high, normal, low (see --priorities)`},
		{"retry bad priority", []string{pg, "--priorities", "hi=0,lo=1", "retry", "--state", "dead", "--priority", "normal", "--yes"}, `retry: --priority "normal": not one of the queue's levels hi, lo`},
		{"ls bad limit", []string{pg, "ls", "--state", "dead", "--limit", "0"}, "ls: --limit 0: want 1..1000"},
		{"ls bad output", []string{pg, "ls", "--state", "dead", "-o", "yaml"}, `ls: -o "yaml": want table or json`},
		{"retry ID and filter", []string{pg, "retry", "3", "--state", "dead"}, "retry: give a job ID or --state with filters, not both"},
		{"retry ready", []string{pg, "retry", "--state", "ready", "--yes"}, `retry: --state "ready": want dead or cancelled`},
		{"retry filter without yes", []string{pg, "retry", "--state", "dead", "--target", "t"}, "retry: retrying every matching job needs --yes when stdin is not a terminal"},
		{"show ID and key", []string{pg, "show", "3", "--key", "k"}, "show: give a job ID or --key, not both"},
		{"targets action", []string{pg, "targets", "frob"}, `targets: unknown action "frob"`},
		{"targets no name", []string{pg, "targets", "suspend"}, "targets suspend: want one target name"},
		{"pause argument", []string{pg, "pause", "now"}, `pause: unexpected argument "now"`},
		{"migrate redis", []string{"--redis", "127.0.0.1:1", "migrate"}, "migrate: only PostgreSQL has migrations"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ctl(t, "", tc.args...)
			requireFails(t, r, exitUsage, tc.want)
			require.Empty(t, r.stdout)
		})
	}
}

// TestUsageErrorEscaped: what the user typed is echoed with its control
// and format characters escaped, never sent raw to the terminal.
func TestUsageErrorEscaped(t *testing.T) {
	for _, args := range [][]string{
		{"--fr\x1b[2Job", "stats"},
		{"--pg=postgres://u@127.0.0.1:1/db", "ls", "--state", "dead", "--x\u202etxt"},
		{"--pg=postgres://u@127.0.0.1:1/db", "fr\x9bob"},
	} {
		r := ctl(t, "", args...)
		require.Equal(t, exitUsage, r.code, r.stderr)
		require.NotContains(t, r.stderr, "\x1b")
		require.NotContains(t, r.stderr, "\u202e")
		require.NotContains(t, r.stderr, "\u009b")
		require.Regexp(t, `\\(x1b|u202e|u009b|x9b)`, r.stderr)
	}
}

// TestHelp: -h prints the usage and exits 0.
func TestHelp(t *testing.T) {
	r := ctl(t, "", "-h")
	require.Equal(t, exitOK, r.code)
	require.Contains(t, r.stderr, "usage: queuectl (--pg URL | --redis ADDR | --sqlite FILE)")
	for _, cmd := range commands {
		require.Contains(t, r.stderr, "  "+cmd.name+" ")
	}
}

// TestBadAddress: a URL or address that does not parse is named, and is
// a mistake on the command line (exit 2), as the docs say.
func TestBadAddress(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"pg URL", []string{"--pg", "postgres://u:secret@[::1/db", "stats"}, "--pg: bad URL:"},
		{"pg option", []string{"--pg", "postgres://u@127.0.0.1/db?sslmode=sometimes", "stats"}, "--pg: bad URL:"},
		{"redis no port", []string{"--redis", "localhost", "stats"}, `--redis "localhost": bad address: want host:port`},
		{"redis bad port", []string{"--redis", "localhost:http", "stats"}, `--redis "localhost:http": bad port "http"`},
		{"redis URL", []string{"--redis", "redis://127.0.0.1:6379/zero", "stats"}, "--redis: bad URL:"},
		{"pg escape", []string{"--pg", "postgres://u:secret@127.0.0.1/%zz", "stats"}, "--pg: bad URL:"},
		{"pg not a URL", []string{"--pg", "::not a url::", "stats"}, "--pg: bad URL:"},
		{"redis not a URL", []string{"--redis", "::not a url::", "stats"}, `--redis "::not a url::": bad`},
		{"redis escape", []string{"--redis", "redis://127.0.0.1:6379/%zz", "stats"}, "--redis: bad URL:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ctl(t, "", tc.args...)
			requireFails(t, r, exitUsage, tc.want)
			require.NotContains(t, r.stderr, "secret")
		})
	}
}

// TestUnreachable: a server that does not answer is named, once.
func TestUnreachable(t *testing.T) {
	addr := deadPort(t)
	r := ctl(t, "", "--timeout", "2s", "--pg", "postgres://postgres:secret@"+addr+"/test?sslmode=disable", "stats")
	requireFails(t, r, exitError, "cannot reach PostgreSQL at 127.0.0.1:", `(database "test")`, "connection refused")
	require.NotContains(t, r.stderr, "secret")

	r = ctl(t, "", "--timeout", "2s", "--pg", "postgres://postgres@"+addr+"/test?sslmode=disable", "migrate")
	requireFails(t, r, exitError, "cannot reach PostgreSQL at 127.0.0.1:")

	r = ctl(t, "", "--timeout", "2s", "--redis", addr, "stats")
	requireFails(t, r, exitError, "cannot reach Redis at "+addr, "connection refused")
}

// TestPGNotMigrated: a schema without pgstore's tables, or at an older
// migration, is refused with the command that fixes it.
func TestPGNotMigrated(t *testing.T) {
	pool := newPool(t)
	schema := freshSchema(t, pool)
	r := ctl(t, "", "--pg", pgURL(), "--schema", schema, "stats")
	requireFails(t, r, exitError, `schema "`+schema+`" is not migrated (no table queuekit_jobs): run queuectl --pg URL --schema `+schema+" migrate")

	ctx := context.Background()
	require.NoError(t, pgstore.Migrate(ctx, pool, pgstore.WithSchema(schema)))
	_, err := pool.Exec(ctx, "DELETE FROM "+pgx.Identifier{schema, "queuekit_migrations"}.Sanitize())
	require.NoError(t, err)
	r = ctl(t, "", "--pg", pgURL(), "--schema", schema, "ls", "--state", "dead")
	requireFails(t, r, exitError, `schema "`+schema+`" is at migration 0, this queuectl needs`, "run queuectl --pg URL --schema "+schema+" migrate")
}

// TestPGMigrate: migrate brings a new schema up to date, idempotently;
// an empty schema then knows no queue.
func TestPGMigrate(t *testing.T) {
	pool := newPool(t)
	schema := freshSchema(t, pool)
	for range 2 {
		r := ctl(t, "", "--pg", pgURL(), "--schema", schema, "migrate")
		require.Equal(t, exitOK, r.code, r.stderr)
		require.Contains(t, r.stdout, `schema "`+schema+`" is at migration `)
	}
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT count(*) FROM "+pgx.Identifier{schema, "queuekit_migrations"}.Sanitize()).Scan(&n))
	require.Equal(t, len(pgstore.Migrations()), n)

	r := ctl(t, "", "--pg", pgURL(), "--schema", schema, "--queue", "mail", "stats")
	requireFails(t, r, exitError, `queue "mail" not found in schema "`+schema+`": it has no jobs and no running process (check --queue and --schema)`)
	r = ctl(t, "", "--pg", pgURL(), "--schema", schema, "--queue", "my mail", "stats")
	requireFails(t, r, exitError, `pgstore: queue name "my mail" is not valid`)
}

// TestRedisUnknownQueue: a queue with no keys under the prefix is named;
// so is a name no queue can have.
func TestRedisUnknownQueue(t *testing.T) {
	_, prefix := newRedis(t)
	r := ctl(t, "", "--redis", redisAddr(), "--prefix", prefix, "--queue", "mail", "ls", "--state", "dead")
	requireFails(t, r, exitError, `queue "mail" not found under prefix "`+prefix+`": Redis holds no {`+prefix+`:mail}:* keys (check --queue and --prefix)`)
	r = ctl(t, "", "--redis", redisAddr(), "--prefix", prefix, "--queue", "my mail", "stats")
	requireFails(t, r, exitError, `redisstore: queue name "my mail" is not valid`)
}
