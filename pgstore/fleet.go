package pgstore

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/storekit"
)

// Fleet state: what the processes of one queue share beyond the jobs.
//
//   - The admission bucket (TakeTokens): one GCRA row per queue in
//     queuekit_admission, taken from in one statement by the server's
//     clock; the queue leases tokens from it (see storekit.Admitter).
//   - Presence (Processes): each started process renews a row in
//     queuekit_processes with every count of the ready jobs, that is every
//     poll interval, in the same statement; a row counts for three poll
//     intervals, and Close deletes it.
//   - Fill: Len is that count, so every process sees the same fill, at
//     most a poll interval old (plus its own adds and claims since).

var (
	_ storekit.Admitter   = (*Store[int])(nil)
	_ storekit.FleetSizer = (*Store[int])(nil)
)

// fleetQueries holds the fleet statements with their table names filled in.
type fleetQueries struct {
	take, presence, leave, confirm string
}

func newFleetQueries(schema, jobs string) fleetQueries {
	ident := func(name string) string {
		if schema == "" {
			return pgx.Identifier{name}.Sanitize()
		}
		return pgx.Identifier{schema, name}.Sanitize()
	}
	r := strings.NewReplacer("{admission}", ident("queuekit_admission"), "{processes}", ident("queuekit_processes"), "{jobs}", jobs,
		"{allowed}", sqlAllowed)
	return fleetQueries{take: r.Replace(sqlTake), presence: r.Replace(sqlPresence), leave: r.Replace(sqlLeave), confirm: r.Replace(sqlConfirmTx)}
}

// sqlAllowed is the tokens a take gets from the existing row a: the GCRA
// allowance floor((now - max(tat, now))/T + burst), capped at n, never
// negative. $2 is T, the emission interval in microseconds, $3 burst, $4 n.
const sqlAllowed = `least($4::integer, greatest(0, floor(extract(epoch FROM (statement_timestamp() - greatest(a.tat, statement_timestamp()))) * 1e6 / $2::float8 + $3::integer)))::integer`

// sqlTake takes up to $4 tokens from queue $1's bucket (a bucket never
// used is full) and returns the tokens granted and, in microseconds, how
// long until the bucket holds one again (meaningful when none was).
//
// Its commit does not wait for the WAL flush (synchronous_commit off for
// this transaction only, set inside the statement): a take then costs one
// round trip and no disk wait, and a server crash can at worst forget the
// last takes, refilling the bucket a little.
const sqlTake = `
INSERT INTO {admission} AS a (queue, tat, granted)
SELECT $1::text, statement_timestamp() + make_interval(secs => least($4::integer, $3::integer) * $2::float8 / 1e6), least($4::integer, $3::integer)
FROM (SELECT set_config('synchronous_commit', 'off', true)) AS async
ON CONFLICT (queue) DO UPDATE SET
    granted = {allowed},
    tat = greatest(a.tat, statement_timestamp()) + make_interval(secs => {allowed} * $2::float8 / 1e6)
RETURNING granted, greatest(0, extract(epoch FROM (tat - statement_timestamp())) * 1e6 - ($3::integer - 1) * $2::float8)::float8`

// sqlPresence renews process $3's presence in queue $1 for $4 seconds,
// deletes presence rows a minute past their expiry, and returns the
// queue's available jobs (counting at most $2) and its live processes.
const sqlPresence = `
WITH me AS (
    INSERT INTO {processes} (queue, owner, expires_at)
    VALUES ($1::text, $3::text, statement_timestamp() + make_interval(secs => $4::float8))
    ON CONFLICT (queue, owner) DO UPDATE SET expires_at = excluded.expires_at
), gone AS (
    DELETE FROM {processes} WHERE queue = $1::text AND expires_at < statement_timestamp() - interval '1 minute'
)
SELECT (SELECT count(*) FROM (SELECT 1 FROM {jobs} WHERE queue = $1::text AND state = 'available' LIMIT $2::bigint) c),
       (SELECT count(*) FROM {processes} WHERE queue = $1::text AND owner <> $3::text AND expires_at > statement_timestamp()) + 1`

// sqlLeave deletes process $2's presence in queue $1.
const sqlLeave = `DELETE FROM {processes} WHERE queue = $1::text AND owner = $2::text`

// sqlConfirmTx returns which of the job IDs $1 exist: their transactions
// committed.
const sqlConfirmTx = `SELECT id FROM {jobs} WHERE id = ANY($1::bigint[])`

// TakeTokens implements storekit.Admitter: it takes up to n tokens from the
// queue's admission bucket, shared by every process of the queue, in one
// statement (a GCRA on the queuekit_admission row, by the server's
// clock). The queue calls it once per lease of tokens, not per Admit.
func (s *Store[T]) TakeTokens(ctx context.Context, perSecond float64, burst, n int) (int, time.Duration, error) {
	switch {
	case !s.bound.Load():
		return 0, 0, ErrNotBound
	case !(perSecond > 0) || math.IsInf(perSecond, 0):
		return 0, 0, fmt.Errorf("pgstore: TakeTokens: perSecond %v: must be > 0 and finite", perSecond)
	case burst < 1 || n < 1:
		return 0, 0, fmt.Errorf("pgstore: TakeTokens: burst %d, n %d: both must be >= 1", burst, n)
	}
	var (
		got    int
		waitUs float64
	)
	err := s.pool.QueryRow(ctx, s.fq.take, s.cfg.Name, 1e6/perSecond, burst, n).Scan(&got, &waitUs)
	if nm := s.notMigrated(err); nm != nil {
		return 0, 0, nm
	}
	if err != nil {
		s.noteErr(err)
		return 0, 0, fmt.Errorf("pgstore: admission: %w", err)
	}
	return got, time.Duration(waitUs * float64(time.Microsecond)), nil
}

// Processes implements storekit.FleetSizer: the started processes of the
// queue (stores on the same database, schema and queue name), this one
// included, as counted with the ready jobs every poll interval. A process
// counts until three poll intervals after its last count, or until its
// store closes.
func (s *Store[T]) Processes() int { return int(max(s.procs.Load(), 1)) }

// presenceTTL is how long a presence row counts after its renewal.
func (s *Store[T]) presenceTTL() time.Duration { return 3 * s.o.PollInterval }

// countFleet refreshes Len's count and this process's presence, and reads
// the number of live processes, in one statement.
func (s *Store[T]) countFleet(ctx context.Context) error {
	var ready, procs int64
	err := s.pool.QueryRow(ctx, s.fq.presence, s.cfg.Name, s.lenLimit(), s.owner, s.presenceTTL().Seconds()).Scan(&ready, &procs)
	s.noteErr(err)
	if err != nil {
		return fmt.Errorf("pgstore: count ready: %w", err)
	}
	s.ready.Store(ready)
	s.procs.Store(procs)
	return nil
}

// leaveFleet deletes this process's presence row, so that the others stop
// counting it at their next count.
func (s *Store[T]) leaveFleet(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := s.pool.Exec(ctx, s.fq.leave, s.cfg.Name, s.owner); err != nil {
		s.cfg.Logger.Warn("pgstore: removing this process's presence failed; it lapses", "err", err)
	}
}

// A job EnqueueTx inserted exists only once the caller's transaction
// commits, which the store cannot see. So EnqueueTx remembers the job, and
// the promoter, woken by the NOTIFY that the commit sends (or at its next
// poll, if the notification was missed), looks for the remembered IDs: a
// row it finds is committed, and the job is reported to the queue as
// enqueued, by the process that called EnqueueTx. A job not found after
// txWatch (a transaction rolled back, or still open) is forgotten,
// uncounted.

// txWatch bounds how long EnqueueTx's jobs are looked for.
const txWatch = 10 * time.Minute

// txJob is a job EnqueueTx inserted, waiting for its transaction's commit.
type txJob struct {
	ev queue.Event
	at time.Time // when EnqueueTx returned (this process's clock)
}

type txWatcher struct {
	mu   sync.Mutex
	jobs map[int64]txJob
}

func (w *txWatcher) add(id int64, j txJob) {
	w.mu.Lock()
	if w.jobs == nil {
		w.jobs = make(map[int64]txJob)
	}
	w.jobs[id] = j
	w.mu.Unlock()
}

func (w *txWatcher) ids() []int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	ids := make([]int64, 0, len(w.jobs))
	for id := range w.jobs {
		ids = append(ids, id)
	}
	return ids
}

func (w *txWatcher) pending() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.jobs) > 0
}

// confirmTx reports the EnqueueTx jobs whose transactions committed and
// forgets those looked for longer than txWatch.
func (s *Store[T]) confirmTx(ctx context.Context) error {
	ids := s.tx.ids()
	rows, err := s.pool.Query(ctx, s.fq.confirm, ids)
	if err != nil {
		s.noteErr(err)
		return fmt.Errorf("pgstore: EnqueueTx commits: %w", err)
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		s.noteErr(err)
		return fmt.Errorf("pgstore: EnqueueTx commits: %w", err)
	}
	var events []queue.Event
	s.tx.mu.Lock()
	for _, id := range found {
		if j, ok := s.tx.jobs[id]; ok {
			events = append(events, j.ev)
			delete(s.tx.jobs, id)
		}
	}
	now := time.Now()
	for id, j := range s.tx.jobs {
		if now.Sub(j.at) > txWatch {
			delete(s.tx.jobs, id)
		}
	}
	s.tx.mu.Unlock()
	for _, ev := range events {
		s.cfg.Report(ev)
	}
	return nil
}
