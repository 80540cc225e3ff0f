// Package sqlitestore keeps a queue.Queue's jobs in one SQLite file: jobs
// survive crashes and restarts with no server to run, and several
// processes on one machine may share the file (a fleet on one host). It
// implements the same contract as pgstore and redisstore (storekit.Store,
// storekit.Leaser and the optional interfaces, checked by storetest.Run
// and storetest.RunAdmin), in pure Go (modernc.org/sqlite), so that
// CGO_ENABLED=0 builds and cross-compiles keep working.
//
//	db, _ := sqlitestore.Open("/var/lib/app/jobs.db")
//	if err := sqlitestore.Migrate(ctx, db); err != nil { ... }   // idempotent; safe to race
//	store, err := sqlitestore.New[Announce](db)
//	q, err := queue.NewWithStore(store, handle, queue.WithName("announces"))
//	q.Start(ctx)
//	q.Enqueue(ctx, queue.Job[Announce]{Key: "hash:peer", Payload: a})
//
// Open one DB per file per process and give it to New for each queue:
// several queues share one file (rows carry the queue's name) and one
// writer. Close the stores (their queues' Shutdown) before the DB.
//
// # Durability
//
// The file is in WAL mode. Every write of every queue of the process goes
// through one writer goroutine, which takes the writes queued meanwhile
// (enqueues, claims, outcomes, heartbeats) and commits them in one
// transaction, each in a savepoint of its own so that a refused one (a
// duplicate key) undoes nothing else: one commit per batch, whatever the
// number of workers (group commit). A call returns once its batch
// committed, with its own result.
//
// With SyncFull (the default, WithSynchronous), a commit waits for the
// write-ahead log to reach the disk: an Enqueue that returned, or an
// outcome that returned, survives the process's death and a power loss.
// With SyncNormal a commit does not wait for the disk (the log is synced
// at checkpoints): a process killed with SIGKILL loses nothing, but a
// power loss or an operating-system crash may forget the last commits
// (accepted jobs lost, finished jobs run again); the file stays
// consistent. Commits cost about an order of magnitude less; see
// docs/benchmarks.md.
//
// # Several processes
//
// SQLite lets one transaction write at a time. Writers of several
// processes take, for their transaction, an advisory lock (flock) on the
// file path+"-queuelock", so that they wait in the kernel and take turns
// instead of polling SQLite's lock (whose busy handler sleeps up to
// 100 ms and lets a busy process starve another); the busy timeout
// (WithBusyTimeout) is the backstop, and a batch that still finds the
// file locked is retried while its callers wait: SQLITE_BUSY never
// reaches a caller. Readers (Stats, listings) never wait for writers.
//
// There is no NOTIFY. Each process looks at PRAGMA data_version every
// wake interval (WithWakeInterval, default 2 ms), a read of the WAL's
// shared memory with no I/O: when another connection committed, its
// waiting workers claim again, its promoter reads the next due time
// again, and it reads the announcements (target state, slots) other
// processes appended to queuekit_notes. A job added by another process
// is so claimed within the wake interval plus one commit; this process's
// own adds wake its workers at once. The poll interval
// (WithPollInterval, default 1 s) is the floor under both.
//
// # Claims, leases and outcomes
//
// A worker's claim is a statement of the writer's next batch: jobs are
// claimed in priority, run_at, id order (or by stride scheduling over
// weighted priorities' shares), leased to this process for the lease TTL
// (WithLeaseTTL, default 30 s, renewed by the queue's heartbeats). The
// outcomes of the workers that just finished and the claims of the
// workers that wait share a commit. An outcome for a run whose lease
// expired returns storekit.ErrLeaseLost and writes nothing.
//
// Every process rescues, every janitor interval, the queue's jobs whose
// lease expired (a crashed process's jobs run again within the lease TTL
// plus the interval, whether or not it led). One process per queue leads
// (a row of queuekit_leaders, renewed every third of WithLeaderTTL) and
// prunes completed, cancelled and dead jobs after their retention
// (WithCompletedRetention, WithDeadRetention), expired unique-window
// marks and old announcements.
//
// Times are the queue's Clock's, in nanoseconds: the processes sharing a
// file share a machine and its clock. A job is never claimed before its
// RunAt. Each process promotes due scheduled jobs on a timer to the
// earliest due time it knows of, read again when the file changes (so a
// job another process scheduled arms the timer within the wake
// interval). When the process has workers waiting, the promotion claims
// the jobs it made available for them in the same transaction: a due job
// costs one commit before it runs.
//
// # Your own data in the same file
//
// DB.SQL returns a database/sql pool on the file whose transactions take
// the write lock at their start (BEGIN IMMEDIATE). EnqueueTx adds a job in
// such a transaction: the job exists only if the transaction commits,
// with the program's own rows.
//
// # Schema
//
// Migrate applies the versioned SQL files embedded from migrations/ (also
// readable as plain .sql) in one transaction and records them in
// queuekit_migrations; Start refuses a file that lacks the latest
// (*NotMigratedError, matching ErrNotMigrated). Keys and groups are BLOBs,
// kept as given whatever their bytes and length. A job's Meta is a JSON
// text column, NULL when empty.
//
// # Why modernc.org/sqlite
//
// Both pure-Go drivers were measured on this workload (single-row
// commits, bulk inserts, claim-and-complete batches) and came out within
// the machine's noise of each other; modernc.org/sqlite was chosen for
// being a plain Go translation of SQLite (no WebAssembly runtime to start
// and to hold in memory per connection), the more widely used of the two,
// and for its _txlock and _pragma connection parameters. docs/benchmarks.md
// has the figures.
package sqlitestore
