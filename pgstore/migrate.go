package pgstore

import (
	"context"
	"embed"
	"fmt"
	"hash/fnv"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migration is one versioned schema change, as embedded in the module. The
// same files are in the module's migrations/ directory for users of their
// own migration tool.
type Migration struct {
	Version int    // from the file name's numeric prefix, e.g. 1 for 001_create_jobs.sql
	Name    string // the file name
	SQL     string // the statements; tables are unqualified (see WithSchema)
}

// Migrations returns the embedded migrations in version order.
func Migrations() []Migration {
	entries, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		panic("pgstore: embedded migrations: " + err.Error())
	}
	var out []Migration
	for _, e := range entries {
		prefix, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(prefix)
		if !ok || err != nil || path.Ext(e.Name()) != ".sql" {
			panic("pgstore: bad migration file name " + e.Name())
		}
		b, err := migrationFiles.ReadFile("migrations/" + e.Name())
		if err != nil {
			panic("pgstore: embedded migrations: " + err.Error())
		}
		out = append(out, Migration{Version: v, Name: e.Name(), SQL: string(b)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out
}

// latestMigration is the version of the last embedded migration.
var latestMigration = sync.OnceValue(func() int {
	ms := Migrations()
	return ms[len(ms)-1].Version
})

// migrationsTable is the quoted name of schema's queuekit_migrations
// table ("": the search_path's).
func migrationsTable(schema string) string {
	if schema == "" {
		return pgx.Identifier{"queuekit_migrations"}.Sanitize()
	}
	return pgx.Identifier{schema, "queuekit_migrations"}.Sanitize()
}

// Migrate brings the store's tables up to date: it creates the schema named
// by WithSchema if needed and applies, in one transaction, every embedded
// migration not yet recorded in its queuekit_migrations table. Options other
// than WithSchema are ignored.
//
// Migrate is idempotent and safe when several processes call it at once:
// it holds a transaction-scoped advisory lock, per schema, while it works.
func Migrate(ctx context.Context, pool *pgxpool.Pool, opts ...Option) error {
	o, err := buildOptions(opts)
	if err != nil {
		return err
	}
	if pool == nil {
		return fmt.Errorf("pgstore: Migrate: nil pool")
	}
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", lockKey("migrate", o.schema)); err != nil {
			return fmt.Errorf("pgstore: migrate: lock: %w", err)
		}
		if o.schema != "" {
			ident := pgx.Identifier{o.schema}.Sanitize()
			if _, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+ident); err != nil {
				return fmt.Errorf("pgstore: migrate: create schema: %w", err)
			}
			// SET LOCAL ends with the transaction; the pool's connection
			// keeps its own search_path.
			if _, err := tx.Exec(ctx, "SET LOCAL search_path TO "+ident); err != nil {
				return fmt.Errorf("pgstore: migrate: search_path: %w", err)
			}
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS queuekit_migrations (
			version    integer     PRIMARY KEY,
			name       text        NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
			return fmt.Errorf("pgstore: migrate: %w", err)
		}
		rows, err := tx.Query(ctx, "SELECT version FROM queuekit_migrations")
		if err != nil {
			return fmt.Errorf("pgstore: migrate: %w", err)
		}
		applied, err := pgx.CollectRows(rows, pgx.RowTo[int])
		if err != nil {
			return fmt.Errorf("pgstore: migrate: %w", err)
		}
		done := make(map[int]bool, len(applied))
		for _, v := range applied {
			done[v] = true
		}
		for _, m := range Migrations() {
			if done[m.Version] {
				continue
			}
			// No arguments: pgx sends the file with the simple protocol,
			// which runs several statements.
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return fmt.Errorf("pgstore: migration %s: %w", m.Name, err)
			}
			if _, err := tx.Exec(ctx, "INSERT INTO queuekit_migrations (version, name) VALUES ($1, $2)", m.Version, m.Name); err != nil {
				return fmt.Errorf("pgstore: migration %s: %w", m.Name, err)
			}
		}
		return nil
	})
}

// lockKey derives an advisory-lock key from a purpose and names.
func lockKey(parts ...string) int64 {
	h := fnv.New64a()
	h.Write([]byte("queuekit.pgstore"))
	for _, p := range parts {
		h.Write([]byte{0})
		h.Write([]byte(p))
	}
	return int64(h.Sum64())
}
