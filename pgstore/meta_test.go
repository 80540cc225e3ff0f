package pgstore_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/admin"
	"github.com/queuekit/queue/pgstore"
	"github.com/queuekit/queue/queuetype"
)

// copyTracer records the columns of every COPY a pool sends.
type copyTracer struct {
	mu   sync.Mutex
	cols [][]string
}

func (t *copyTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (t *copyTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (t *copyTracer) TraceCopyFromStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceCopyFromStartData) context.Context {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cols = append(t.cols, d.ColumnNames)
	return ctx
}

func (t *copyTracer) TraceCopyFromEnd(context.Context, *pgx.Conn, pgx.TraceCopyFromEndData) {}

func (t *copyTracer) copies() [][]string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([][]string(nil), t.cols...)
}

// TestMetaEnqueuePaths: a job's metadata survives the enqueue paths the
// storetest Meta section does not take (EnqueueMany by COPY, by the insert
// from arrays, by the keyed insert and with unique windows; EnqueueTx),
// the admin API's Get, List and Retry; a COPY without metadata sends no
// meta column; a row of the
// older schema (meta NULL) or with a meta that is not an object of
// strings comes back without metadata.
func TestMetaEnqueuePaths(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tr := &copyTracer{}
	pool := newPool(t, pgURL(), 8, func(cfg *pgxpool.Config) { cfg.ConnConfig.Tracer = tr })
	s, err := pgstore.New[P](pool, pgstore.WithSchema(e.schema))
	require.NoError(t, err)
	bind(t, s, "meta", nil)
	a := adminOf(s)
	meta := func(k, v string) queue.Meta {
		return queuetype.MetaOf(map[string]string{k: v, "tenant": "ÿ-日本 \"q\"\n"})
	}

	pgstore.SetCopyMin(s, 1)
	_, err = s.EnqueueMany(bg, []queue.Job[P]{{Payload: P{N: 1}}, {Payload: P{N: 2}}})
	require.NoError(t, err)
	_, err = s.EnqueueMany(bg, []queue.Job[P]{{Payload: P{N: 3}, Meta: meta("path", "copy")}, {Payload: P{N: 4}}})
	require.NoError(t, err)
	pgstore.SetCopyMin(s, 3)
	_, err = s.EnqueueMany(bg, []queue.Job[P]{{Payload: P{N: 11}, Meta: meta("path", "plain")}, {Payload: P{N: 12}}})
	require.NoError(t, err)
	_, err = s.EnqueueMany(bg, []queue.Job[P]{{Key: "k5", Payload: P{N: 5}, Meta: meta("path", "keyed")}, {Key: "k6", Payload: P{N: 6}}})
	require.NoError(t, err)
	_, err = s.EnqueueMany(bg, []queue.Job[P]{{Key: "k7", UniqueFor: time.Hour, Payload: P{N: 7}, Meta: meta("path", "window")}})
	require.NoError(t, err)
	tx, err := pool.Begin(bg)
	require.NoError(t, err)
	_, err = s.EnqueueTx(bg, tx, queue.Job[P]{Payload: P{N: 8}, Meta: meta("path", "tx")})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(bg))
	// Rows as an older pgstore or a hand would leave them.
	hand, err := s.EnqueueMany(bg, []queue.Job[P]{{Payload: P{N: 9}, Meta: meta("path", "by hand")}, {Payload: P{N: 10}, Meta: meta("path", "by hand")}})
	require.NoError(t, err)
	_, err = e.pool.Exec(bg, `UPDATE `+jobsTable(e)+` SET meta = CASE WHEN id = $1 THEN '[1]'::jsonb END WHERE id IN ($1, $2)`,
		hand[0].ID, hand[1].ID)
	require.NoError(t, err)

	copies := tr.copies()
	require.Len(t, copies, 2, "batches without keys go by COPY from SetCopyMin's size")
	require.NotContains(t, copies[0], "meta", "a batch without metadata sends no meta column")
	require.Contains(t, copies[1], "meta")

	want := map[int]queue.Meta{3: meta("path", "copy"), 5: meta("path", "keyed"), 7: meta("path", "window"), 8: meta("path", "tx"), 11: meta("path", "plain")}
	ids := map[int]int64{}
	for range 12 {
		j := claimWithin(t, s, 5*time.Second)
		require.Equal(t, want[j.Payload.N], j.Meta, "job %d", j.Payload.N)
		ids[j.Payload.N] = j.ID
		require.NoError(t, s.Dead(bg, j, errors.New("to retry")))
	}

	// The admin API lists and shows it, and its Retry keeps it.
	info, err := a.Get(bg, ids[3], false)
	require.NoError(t, err)
	require.Equal(t, want[3], info.Meta)
	p, err := a.List(bg, admin.Query{Filter: admin.Filter{State: admin.Dead}, Oldest: true, Limit: 100})
	require.NoError(t, err)
	require.Len(t, p.Jobs, 12)
	for _, j := range p.Jobs {
		for n, id := range ids {
			if id == j.ID {
				require.Equal(t, want[n], j.Meta, "listed job %d", n)
			}
		}
	}
	require.NoError(t, a.Retry(bg, ids[8]))
	j := claimWithin(t, s, 5*time.Second)
	require.Equal(t, ids[8], j.ID)
	require.Equal(t, want[8], j.Meta, "claim after the admin API's Retry")
	require.NoError(t, s.Complete(bg, j))
}

// TestEnqueueManyLargeBatchByCopy: a batch without keys whose payloads
// add up to 16 MiB or more goes by COPY however few its jobs, and every
// job is stored whole.
func TestEnqueueManyLargeBatchByCopy(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tr := &copyTracer{}
	pool := newPool(t, pgURL(), 4, func(cfg *pgxpool.Config) { cfg.ConnConfig.Tracer = tr })
	s, err := pgstore.New[P](pool, pgstore.WithSchema(e.schema))
	require.NoError(t, err)
	bind(t, s, "largecopy", nil)
	note := strings.Repeat("x", 1<<20-100) // under WithMaxPayload's default once encoded
	small := []queue.Job[P]{{Payload: P{N: 1, Note: note}}, {Payload: P{N: 2, Note: note}}}
	_, err = s.EnqueueMany(bg, small)
	require.NoError(t, err)
	require.Empty(t, tr.copies(), "2 MiB: the insert from arrays")
	var large []queue.Job[P]
	for i := range 17 {
		large = append(large, queue.Job[P]{Payload: P{N: 10 + i, Note: note}})
	}
	added, err := s.EnqueueMany(bg, large)
	require.NoError(t, err)
	require.Len(t, tr.copies(), 1, "17 MiB: COPY")
	for i, a := range added {
		require.NotZero(t, a.ID, "job %d", i)
	}
	require.Equal(t, 19, count(t, e.pool, "SELECT count(*) FROM "+jobsTable(e)+" WHERE length(payload) > 1000000"))
}

// TestMetaRefused: metadata that breaks Meta's rules is refused by every
// enqueue path with ErrInvalidJob naming the key, and nothing is
// inserted.
func TestMetaRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := newStore[P](t, e)
	bind(t, s, "metabad", nil)
	var bad queue.Meta
	bad.Set("bad\x00key", "v")
	_, err := s.Add(bg, queue.Job[P]{Meta: bad})
	require.ErrorIs(t, err, queue.ErrInvalidJob)
	require.Contains(t, err.Error(), "bad")
	_, err = s.EnqueueMany(bg, []queue.Job[P]{{}, {Meta: bad}})
	require.ErrorIs(t, err, queue.ErrInvalidJob)
	require.Contains(t, err.Error(), "job 1")
	require.Equal(t, 0, count(t, e.pool, "SELECT count(*) FROM "+jobsTable(e)))
}
