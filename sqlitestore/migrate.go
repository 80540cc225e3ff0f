package sqlitestore

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migration is one versioned schema change, as embedded in the module.
// The same files are in the module's migrations/ directory.
type Migration struct {
	Version int    // from the file name's numeric prefix
	Name    string // the file name
	SQL     string // the statements
}

// Migrations returns the embedded migrations in version order.
func Migrations() []Migration {
	entries, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		panic("sqlitestore: embedded migrations: " + err.Error())
	}
	var out []Migration
	for _, e := range entries {
		prefix, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(prefix)
		if !ok || err != nil || path.Ext(e.Name()) != ".sql" {
			panic("sqlitestore: bad migration file name " + e.Name())
		}
		b, err := migrationFiles.ReadFile("migrations/" + e.Name())
		if err != nil {
			panic("sqlitestore: embedded migrations: " + err.Error())
		}
		out = append(out, Migration{Version: v, Name: e.Name(), SQL: string(b)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out
}

var latestMigration = sync.OnceValue(func() int {
	ms := Migrations()
	return ms[len(ms)-1].Version
})

// ErrNotMigrated is matched by the error Start returns when the file's
// tables are missing or older than this package's migrations.
var ErrNotMigrated = errors.New("sqlitestore: the database is not migrated")

// NotMigratedError says what Start found missing.
type NotMigratedError struct {
	Path    string // the database file
	Version int    // the latest migration applied (0: none)
	Want    int    // the latest migration this package has
}

func (e *NotMigratedError) Error() string {
	if e.Version == 0 {
		return fmt.Sprintf("sqlitestore: %s is not migrated (no queuekit tables); run sqlitestore.Migrate", e.Path)
	}
	return fmt.Sprintf("sqlitestore: %s is at migration %d, this package needs %d; run sqlitestore.Migrate", e.Path, e.Version, e.Want)
}

// Is makes the error match ErrNotMigrated.
func (e *NotMigratedError) Is(target error) bool { return target == ErrNotMigrated }

// Migrate brings the file's tables up to date: it applies, in one
// transaction, every embedded migration not yet recorded in its
// queuekit_migrations table. It is idempotent and safe when several
// processes call it at once (the transaction holds the write lock).
func Migrate(ctx context.Context, db *DB) error {
	if db == nil {
		return errors.New("sqlitestore: Migrate: nil DB")
	}
	return db.write(ctx, func(tx *wtx) error {
		if _, err := tx.tx.Exec(`CREATE TABLE IF NOT EXISTS queuekit_migrations (
			version    INTEGER PRIMARY KEY,
			name       TEXT    NOT NULL,
			applied_at INTEGER NOT NULL DEFAULT (unixepoch()))`); err != nil {
			return fmt.Errorf("sqlitestore: migrate: %w", err)
		}
		done := map[int]bool{}
		rows, err := tx.tx.Query("SELECT version FROM queuekit_migrations")
		if err != nil {
			return fmt.Errorf("sqlitestore: migrate: %w", err)
		}
		for rows.Next() {
			var v int
			if err := rows.Scan(&v); err != nil {
				rows.Close()
				return err
			}
			done[v] = true
		}
		rows.Close()
		for _, m := range Migrations() {
			if done[m.Version] {
				continue
			}
			if _, err := tx.tx.Exec(m.SQL); err != nil {
				return fmt.Errorf("sqlitestore: migration %s: %w", m.Name, err)
			}
			if _, err := tx.tx.Exec("INSERT INTO queuekit_migrations (version, name) VALUES (?, ?)", m.Version, m.Name); err != nil {
				return fmt.Errorf("sqlitestore: migration %s: %w", m.Name, err)
			}
		}
		return nil
	})
}

// checkSchema returns a *NotMigratedError when the file lacks this
// package's latest migration.
func (db *DB) checkSchema(ctx context.Context) error {
	var n int
	if err := db.r.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'queuekit_migrations'").Scan(&n); err != nil {
		return fmt.Errorf("sqlitestore: checking the schema: %w", err)
	}
	want := latestMigration()
	if n == 0 {
		return &NotMigratedError{Path: db.path, Want: want}
	}
	var v int
	if err := db.r.QueryRowContext(ctx, "SELECT coalesce(max(version), 0) FROM queuekit_migrations").Scan(&v); err != nil {
		return fmt.Errorf("sqlitestore: checking the schema: %w", err)
	}
	if v < want {
		return &NotMigratedError{Path: db.path, Version: v, Want: want}
	}
	return nil
}
