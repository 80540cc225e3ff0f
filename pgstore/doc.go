// Package pgstore keeps a queue.Queue's jobs in PostgreSQL, so that several
// processes share one queue and jobs survive crashes and restarts. It
// implements storekit.Store and storekit.Leaser with pgx v5.
//
//	pool, _ := pgxpool.New(ctx, "postgres://app@db/app")
//	if err := pgstore.Migrate(ctx, pool); err != nil { ... }   // once per deploy; safe to race
//	store, err := pgstore.New[Announce](pool)
//	q, err := queue.NewWithStore(store, handle, queue.WithName("announces"))
//	q.Start(ctx)
//	q.Enqueue(ctx, queue.Job[Announce]{Key: "hash:peer", Payload: a})
//
// Every process that runs the same queue name against the same database
// (and schema) works the same queue.
//
// # Schema
//
// Migrate applies the versioned SQL files embedded from migrations/ (also
// readable as plain .sql for other migration tools; see Migrations). One
// table, queuekit_jobs, holds the jobs of every named queue; queuekit_leaders
// holds one leadership row per queue; queuekit_unique (migration 002)
// holds the unique-window marks (Job.UniqueFor). WithSchema puts them in a
// schema of their own.
//
// Start (called by the queue's Start) refuses a schema that Migrate has
// not brought up to date: its error, a *NotMigratedError matching
// ErrNotMigrated, names the schema, the missing table or the versions,
// and Migrate. A schema migrated with another tool from the same files
// (no queuekit_migrations table) is checked for its tables only. When
// the database cannot be reached at Start (an outage: connection refused,
// a timeout), the store starts anyway and retries in the background; a
// missing table found later makes Stats unhealthy and return
// ErrNotMigrated, as Add does. A configuration that cannot work is not an
// outage: a refused user or password, an unknown database or a host name
// that does not resolve is Start's error, at once (as it is redisstore's
// New), and nothing starts.
//
// A job's state is one of scheduled (waiting for run_at), available (due,
// waiting for a worker), running (leased to a process), retryable (put back
// by Retry or Defer, waiting for run_at), pending (a coalesced rerun waiting
// for the running job with its key to end), and the final completed, dead
// and cancelled, which are kept for their retention period
// (WithCompletedRetention, WithDeadRetention) and then pruned in bounded
// batches.
//
// # Target health and cadence
//
// The store implements storekit.TargetStore: the queue's target health
// (suspensions, disabled targets with their reasons, open circuit
// breakers) and its fan-out cadence (SetNextDue) are rows of
// queuekit_targets (migration 004), shared by every process of the queue
// and kept across restarts. SaveTargets writes a batch in one transaction
// and one round trip and announces each entry, in its NOTIFY payload, on
// the schema's channel; the LISTEN connection hands the entries to the
// queue, so a change reaches the other processes one commit and one
// notification after it was made. With WithListen(false), or while the
// LISTEN connection is down, the queue's reload (once a second) brings
// them. Start waits, at most 5 s, for the LISTEN connection when the queue
// watches target state, so that nothing written after Start is missed.
// A fixed per-target concurrency limit (queue.WithTargetConcurrency) is
// shared: the store implements storekit.SlotStore on the queuekit_slots
// table (migration 006), so at most k jobs of a target run at once in the
// fleet, and keeps the processes waiting for a slot in line in
// queuekit_slot_line (migration 008), so that the slots go round them;
// the fair share stays each process's own. It implements
// queue.HoldStore too: a job held back for its target's suspension has
// the held column set (migration 007), and a Resume in any process, or
// the admin backend's ResumeTarget or Enable (queuectl), makes the
// target's held jobs due at once. See "Fleet state" in
// docs/OPERATIONS.md.
//
// # Dedupe and coalescing
//
// A partial unique index over the live states (scheduled, available,
// running, retryable) makes a key's dedupe atomic across processes; a
// second one allows one pending rerun per key, a third one scheduled job
// per group. Add never raises on a duplicate: it returns queue.ErrDuplicate,
// so EnqueueTx leaves the caller's transaction usable.
//
// A key or group that a text column or an index entry cannot hold (not
// UTF-8, a NUL byte, longer than 1 024 bytes, or starting with
// "#sha256:") is stored as "#sha256:" and the hex SHA-256 of its bytes,
// which the indexes and dedupe use, and in full in key_bytes
// (group_bytes), from which Claim, Scheduled and the admin API hand it
// back (migration 009). Other keys are stored as they are. Events that
// the store reports for such a job on its own (a lease rescue, a
// promotion, an admin action) carry the stored form.
//
// A job's metadata (Job.Meta) is kept in the meta column (migration 010)
// as the JSON object of its MarshalJSON, jsonb, and read back at every
// claim and by the admin API; a job without metadata leaves it NULL (an
// EnqueueMany batch with none does not even send the column), and rows
// from before the migration read back as empty Meta.
//
// An Add for a key whose job is running share-locks that row; the
// completion, which must wait for the lock, releases the rerun in a later
// statement of its transaction and so always sees it. A rerun is never
// stranded.
//
// # Unique windows
//
// A job with a UniqueFor window takes its key's mark, a row of
// queuekit_unique holding the window's end, in the statement that inserts
// it: an upsert that takes over only a mark whose window has ended, so
// that of two processes adding the key at once one takes it and the other
// is refused. The window is judged by the database's clock
// (statement_timestamp(), shifted by a fake clock's advances as leases
// are; see Clocks), so every process of the queue agrees on it. The
// statement runs in a transaction of its own (a savepoint inside
// EnqueueTx's), rolled back when the job is refused for another reason (a
// pending key, a full queue), which so takes no mark; EnqueueMany takes
// the marks of its windowed jobs, inserts, and gives back those of the
// jobs it skipped, in one transaction. Every Add, windowed or not, is
// refused while its key's window is open, whatever the state of the job
// that opened it, kept, pruned, cancelled or purged. Expired marks are
// deleted by the leader's janitor with the final jobs (Prune).
//
// # Claims, leases and outcomes
//
// Jobs are claimed with FOR UPDATE SKIP LOCKED in priority, run_at, id
// order (strict priorities) or, under weighted priorities, by stride
// scheduling over the priorities' shares with this process's counters
// (run_at, id order within a priority), setting the lease owner and expiry in the same statement. No
// transaction stays open while a job runs. A claimed job not yet handed
// out is extended with the running ones and given back by Close.
//
// The queue heartbeats running jobs every third of the lease TTL (default
// 30 s); the leases are extended in one statement, and a job whose lease
// was lost has its context cancelled by the queue. Complete, Retry, Defer,
// Dead and heartbeats go through one writer goroutine that writes
// everything queued meanwhile in one pipelined implicit transaction: one
// round trip and one commit per batch. Each call returns after its batch
// committed, with its own result, so an outcome Complete reported is
// durable; an outcome for a job this process no longer holds returns
// ErrLeaseLost and writes nothing. A batch whose connection broke is
// retried; a job whose outcome could not be written is rescued when its
// lease expires and runs again (at-least-once).
//
// A fetcher goroutine claims jobs for the Claim callers waiting and, as
// the writer sends a batch, for the workers whose runs it ends, on its own
// connection beside the batch, up to the claim batch size a statement: a
// busy worker usually finds its next job waiting when its outcome
// returns (the claim is not part of the outcome, and may run just after
// it returns, taking a job enqueued meanwhile), and the claim's work runs on the database beside the outcomes' (one
// backend each) instead of after it in one transaction. A claim reads the
// claim index from the first job the last claim took while nothing can
// have made an earlier job claimable, rather than stepping over the dead
// index entries every claimed job leaves until VACUUM. Once a claim
// found no job left, neither a write batch's workers nor a worker that
// starts waiting make the fetcher claim again until something may have
// made a job claimable (an Add, a notification, a promotion, a job put
// back, the due time of a job promoted ahead, a poll): with scheduled
// jobs falling due one at a time, each worker's return cost two claims
// that found nothing. The workers a batch expects back to such a queue
// are not remembered for the next wake-up: those that come back wait
// as Claim callers and are counted once. Before it
// writes a batch, the writer gives the workers its last batch answered a
// moment to come back (for at most half that batch's write, and only while
// they keep coming), so that workers with short jobs share one commit per
// cycle instead of splitting into groups that wait for each other's.
//
// The fetcher's claims commit without waiting for the WAL flush
// (synchronous_commit off for their own transaction, which only claims);
// everything else that writes jobs waits for it: enqueues (alone, many,
// or in the caller's transaction) and outcomes; an outcome's commit also
// makes the claim of its job durable, being later in the WAL. A PostgreSQL crash (not a
// process's) may therefore forget the fetcher's last claims, those of
// roughly the last three wal_writer_delay (600 ms by default) before it:
// their jobs are available again, at the attempt before, and are claimed
// again at once. A run of such a job that was handed out goes on in its
// process as a run whose lease was lost: the next heartbeat finds the job
// no longer running for this process and cancels it, and its outcome
// returns ErrLeaseLost and writes nothing, unless this same process
// claimed the job again meanwhile (same owner, same attempt), in which
// case the first outcome of its two runs is the one written and the other
// is refused. So a job in flight at a database crash may run twice, as
// the jobs of a crashed process run again. A claim is never forgotten
// once any later commit of the server waited for the flush (the WAL is
// written in order): an outcome that returned, whatever process wrote
// it, makes every earlier claim durable, so it never refers to a
// forgotten claim.
//
// # Scheduling and wake-ups
//
// Every process promotes its queue's due scheduled and retryable jobs to
// available on a timer to the earliest due time (on the queue's Clock, so
// fake clocks work), not on a poll. The promoter runs 25 ms before the
// earliest due time and makes available the jobs due within the next
// 50 ms; they are not claimed before their due time (a claim takes only
// jobs with run_at at or before its clock's now): the process's claimer
// claims each at its due time, on a timer of its own, so that a job that
// falls due costs one claim statement, the promotion being done before.
// (Such a job shows as available, and counts in Len, up to 50 ms before
// it is due.) The promoter's timer moves when a job due earlier
// is scheduled: at once for this process's own Add, and on the
// notification of another process's insert, which makes the promoter read
// the earliest due time again (one indexed read; it promotes only if a job
// is due). Processes whose timers fire together share the due rows (SKIP
// LOCKED): one promotes each job and both claim it at its due time. A
// promotion notifies for the jobs due already; the jobs it promoted ahead
// are claimed at their due time by the process that promoted them and by
// the others that aimed at the same due time, and by any process's
// workers returning from an outcome while its last claim found jobs (else
// at its next wake-up); when the process that promoted a job ahead has no
// worker waiting at its due time, it sends the NOTIFY an Add sends, so
// that an idle process claims it. The poll interval remains a safety net. Inserts
// and promotions NOTIFY a channel per schema; a dedicated connection
// LISTENs and wakes the claimer and promoter, so a new job starts within
// milliseconds. Polling alone (WithListen(false), e.g. behind PgBouncer in
// transaction mode) is enough, at the poll interval's latency.
// BenchmarkScheduleLateness measures how late scheduled jobs start with
// two processes on one queue.

// A NOTIFY holds a lock shared by the whole server from its commit's start
// to its end, so that notifying in every insert would serialise concurrent
// inserts. Add therefore notifies after its insert committed, from one
// goroutine per store, at most every 5 ms: each Add is covered by a
// notification sent after its commit, within a few milliseconds; the
// adding process itself is woken at once. EnqueueTx, EnqueueMany,
// promotions and the janitor notify in their own transaction (at commit).
// A drained process (shutting down) no longer promotes: the retries and
// deferrals it writes then (the jobs it interrupts, put back) send the
// Add's notification, on which the other processes' promoters read the
// next due time again.
//
// # Rescue, leader and janitor
//
// Every process of a queue, every janitor interval (default 1 s; each
// wait drawn from the interval's second half), returns jobs whose lease expired to available —
// the lost run used its attempt — or dead-letters them after their last
// attempt, and notifies, so that a waiting worker anywhere takes them at
// once. The statement locks the expired rows with FOR UPDATE SKIP
// LOCKED, so processes rescuing at once share the work and rescue each
// job once. A crashed process's jobs therefore run again within the lease
// TTL + the janitor interval (plus a claim's round trip) while any other
// process of the queue runs, whether or not the crashed process led:
// rescue never waits for a new leader.
//
// One process per queue leads, holding a row in queuekit_leaders whose
// expiry (database time) it renews every third of the TTL (default 10 s);
// the others try every tenth of it, at most every 500 ms, so a dead
// leader is replaced within TTL + min(TTL/10, 500 ms), and at once when it
// resigns in Close. The leader runs the
// janitor's retention pruning: every 60 janitor intervals it prunes old
// final jobs, 20 000 at most per pass, with another pass at the next
// interval while one finds that many. Stats().Leader tells whether this
// process leads.
//
// # Clocks
//
// Leases are judged by the database server's clock, not each process's:
// a claim or heartbeat writes statement_timestamp() plus the lease TTL,
// and the rescue compares the expiry with statement_timestamp(). A process
// whose clock is minutes ahead therefore does not rescue another's live
// lease, and one whose clock is behind (or ahead) does not stamp leases
// that expire early (or outlive its heartbeats). The queue's Clock only
// measures how much time passes: a fake clock's Advance moves this
// process's view of lease time forward, so tests expire leases without
// waiting, while the system clock's reading, right or wrong, does not
// matter. Leadership too is in database time.
//
// Due times are the queue's Clock's: a job's RunAt is a time the caller
// gave, and each process promotes a job when its own clock reaches it. A
// process whose clock is off by e promotes scheduled jobs e early or late
// (a retry's time is computed from the clock of the process that ran it),
// so keep the clocks of a queue's processes in step (NTP) when due times
// must hold to better than their error.
//
// # Capacity
//
// The queue's capacity bounds the available jobs of the queue in the whole
// database, not per process. Add checks it in the insert statement with a
// count of at most Capacity index entries; concurrent Adds may overshoot
// by the number of callers, and a promotion or a released rerun that finds
// no room waits RequeueDelay, as in memory. EnqueueTx and EnqueueMany do
// not check it; WithCapacityCheck(false) turns the check off for Add.
//
// # Admin API
//
// Store.Admin returns the store's backend for package admin (admin.New),
// which queue.Queue's Admin also uses: list jobs by state with keyset
// paging, get one by ID or key, count them, retry a dead or cancelled
// job, delete or cancel a job, pause and resume the queue. It works on a
// store that was passed to queue.New and never started, as queuectl uses
// it. Migration 003 adds what it needs: the queue control table
// (queuekit_queues), a cancel mark on jobs, and listing indexes.
//
// Listing reads one index range per page (ready: run_at, the time each
// job became ready, one range of the claim index per configured priority,
// merged; scheduled, retrying and coalesced reruns: run_at; running:
// attempted_at; done, dead and cancelled: finalized_at; then id), so a
// page costs the same whatever the table holds (about 1-2 ms for 100 of
// 1 000 000 jobs, see BenchmarkAdminList). Ready jobs whose priority
// weight the store's configuration does not have are not listed (Counts
// counts them). Migration 011 dropped the created_at index that ready
// listing used before: every insert paid for it. Counts reads every row of the queue. Done and
// cancelled jobs are listed until WithCompletedRetention prunes them,
// dead ones until WithDeadRetention. Deferred jobs are listed as
// scheduled; the state waiting stays empty.
//
// Pause sets the queue's control row; the claim statement of every
// process tests it (a primary-key probe, evaluated once per statement),
// so no job is claimed once Pause has returned, whichever process
// claims. Enqueues, promotion, outcomes and lease rescue go on, and
// running jobs run to their end. Resume notifies the queue's processes,
// whose waiting workers claim at once (at their next poll when LISTEN is
// off).
//
// Cancel ends a ready or scheduled job (or a coalesced rerun) as
// cancelled at once. A running job is marked: the process running it
// learns at its next heartbeat (a third of WithLeaseTTL, 10 s by
// default; at once when the cancel went through that process's own
// queue.Queue Admin), cancels the job's context, and ends the run as
// cancelled (counted as cancelled) whatever the handler returns. A run
// that completes before its process learns of the mark is done (and a
// cancel after that finds it ended: admin.ErrState); one that fails
// first ends cancelled, not retried nor dead. If the process is gone,
// the lease rescue ends the job as cancelled rather than running it
// again.
//
// Every action is one statement or one short transaction, safe against
// the claims, outcomes, rescues and pruning of every process: Retry and
// pruning of the same dead job leave it either retried (pruning then
// leaves it alone) or gone (Retry returns admin.ErrNotFound); Delete
// refuses a job claimed meanwhile (admin.ErrState). Delete and Cancel of
// a job whose key has a coalesced rerun make the rerun ready.
//
// # Differences from the in-memory store
//
//   - Drain does not wait for the backlog: other processes share it. Claim
//     returns the jobs already claimed for this process, then
//     storekit.ErrDrained.
//   - Len is a recent count (refreshed every poll interval from Start, idle
//     or not, adjusted by this process's own adds and claims), and counts
//     every process's jobs.
//   - A fleet: the processes of a queue share one admission bucket
//     (TakeTokens, a GCRA row in queuekit_admission, migration 005) and
//     count each other (Processes, presence rows in queuekit_processes
//     renewed with the fill), so that queue.Admit admits one bucket's worth
//     for the fleet and queue.ScaleByDepth scales each process on its share
//     of the depth; they hold a target's concurrency slots in
//     queuekit_slots (migration 006), and wait for them in line in
//     queuekit_slot_line (migration 008), so that a WithTargetConcurrency
//     limit holds for the fleet and its slots go round the processes;
//     docs/OPERATIONS.md ("Fleet state") lists what is shared.
//   - EnqueueTx's job is counted and observed by the queue once its
//     transaction has committed (seen by the process that called it).
//   - Jobs are claimed slightly ahead of the workers (see Claims): a job
//     claimed ahead is running as far as Cancel and Stats are concerned.
//   - Delivery is at-least-once: a job whose process dies, or loses its
//     lease, runs again.
//   - Dead jobs are kept (state dead, with their error history) until the
//     retention period passes.
//   - Job times are stored with microsecond precision.
//
// # Testing
//
// The tests run against a real server: QUEUE_PG_URL, by default
// postgres://postgres@127.0.0.1:5432/test?sslmode=disable; each test uses a
// schema of its own. Without a server they skip, unless CI=true.
package pgstore
