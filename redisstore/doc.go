// Package redisstore keeps the jobs of a queue.Queue in Redis, so that
// several processes share one queue, jobs survive restarts, and a crashed
// worker's jobs run again. It implements storekit.Store and storekit.Leaser with
// go-redis v9 and works with any redis.UniversalClient: a single node,
// Sentinel or Cluster. It needs Redis 6.0 or later.
//
//	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
//	store, err := redisstore.New[Announce](rdb, redisstore.WithPrefix("tracker"))
//	if err != nil {
//		return err
//	}
//	q, err := queue.NewWithStore(store, handle, queue.WithName("forward"))
//	if err != nil {
//		return err
//	}
//	if err := q.Start(ctx); err != nil {
//		return err
//	}
//
// All methods of a Store are safe for concurrent use.
//
// # Layout
//
// Every key of a queue starts with the hash tag "{prefix:name}" (WithPrefix,
// queue.WithName), so a queue lives in one Cluster slot and every script is
// Cluster-safe; each script declares every key it touches in KEYS, which a
// test checks under MONITOR, and TestCluster runs the conformance suite
// and whole queues on a real three-master Redis Cluster. On a Cluster,
// queues spread over the masters by name (each tag hashes to its own
// slot); one queue's load stays on one master. The keys are: a ready list per priority; the
// scheduled jobs in a sorted set scored by due time; the running jobs in a
// sorted set scored by lease expiry, with the lease holders in a hash; the
// job records as fields of two hashes (meta, a small JSON object, and data,
// the encoded payload), so that a script reaching a job by ID from a list
// names only declared keys (a job's queue.Meta is a field of its meta
// object, its JSON text, left out when the job has none: metadata costs
// nothing to the jobs without it, and records written before it existed
// read as none); the pending keys, coalesced reruns and
// scheduled groups as hashes; the dead jobs in a sorted set; per-priority
// ready counters; a wake list; the ID sequence, with the registration of
// each ID block to the process that reserved it (in a hash, and in the
// seen bitmaps after their bits, where a lone Add reads it with the job's
// seen bit in one BITFIELD); seen bitmaps; the leader
// key. For the admin API (Store.Admin): the ready index, a sorted set of
// the jobs in the ready lists by enqueue time, kept by every script that
// moves a job in or out of a list so that ready jobs page by keyset in
// O(log n + page); the paused key the claim script checks; the set of
// running jobs an operator cancelled, which the heartbeat script reports;
// the newest dead job of each key.
//
// Every move is one Lua script with bounded work: Add, Claim (which first
// promotes a bounded batch of due jobs), Complete, Dead, Retry, Defer,
// Cancel, Heartbeat, the rescue of expired leases, the janitor's trim,
// Purge. None scans a
// queue; Stats reads counters and cardinalities. A cancelled ready job is
// deleted from the records and its ID left in its list as a tombstone that
// Claim skips, so that no script searches a list. Due times are the
// queue Clock's milliseconds; leases are Redis's (see Clocks). A due time (RunAt, a retry's or a
// deferral's time) is rounded up to the millisecond, never down, so that
// no job runs before its time; Claim returns RunAt so rounded.
//
// Concurrent Adds, Claims and finishes (Complete, Retry, Defer, Dead) on a
// shard are combined: while one script call is in flight, the calls that
// arrive queue up and go together in the next one, so under load a round
// trip carries many jobs, and a lone call still goes at once.
//
// # Target health and cadence
//
// The store implements storekit.TargetStore on the queue's first shard: the
// queue's target health (suspensions, disabled targets with their reasons,
// open circuit breakers) and its fan-out cadence (SetNextDue) are entries
// of the hash "{prefix:name}:targets" (the next-due ones also in the
// sorted set "{prefix:name}:targets:due", by time, so that a load prunes
// those more than a minute past), shared by every process of the queue
// and kept as long as Redis keeps them. SaveTargets writes a batch in one
// script and publishes each entry on the channel "{prefix:name}:targets",
// to which every process subscribes at Start (waiting, at most the
// connect timeout, for Redis to confirm), so a change reaches the other
// processes one round trip and one message after it was made; a message
// lost while the subscription reconnects is made good by the queue's
// reload, once a second. A fixed per-target concurrency limit
// (queue.WithTargetConcurrency) is shared: the store implements
// storekit.SlotStore with a sorted set per target,
// "{prefix:name}:slots:<target>", so at most k jobs of a target run at
// once in the fleet; the fair share stays each process's own. See "Fleet
// state" in docs/OPERATIONS.md.
//
// # Batch enqueue
//
// Store.EnqueueMany adds many jobs in one round trip: their add script
// calls (up to 256 jobs each) go in one pipeline, with the IDs taken from
// blocks reserved beforehand (a batch that needs new blocks reserves all
// it needs at once, in two more round trips). Each job follows Add's
// rules in order (dedupe by Key and Group, the schedule, the capacity);
// it never coalesces. The queue counts and observes the jobs as it does
// Enqueue's: the store reports them (EventEnqueued, or EventDropped for
// a job refused for capacity) through the Report function of its
// storekit.Config.
//
// # The inbox
//
// A lone producer's Add of a plain job (no Key, no Group, due now) is one
// round trip in either case, and on an inbox permit a plain command
// (RPUSHX) rather than a script call: the job, encoded with its record,
// goes to the tail of the queue's inbox, a list in Redis. An Add is a
// lone producer's when no other Add of the process was in progress over
// its last 1024 Adds (and it made 64 before): Adds made at once share the
// combiner's script calls instead, one round trip for many. The add-one
// script grants a process permits when it adds a plain job for it with
// room to spare: up to the IDs left in the process's reserved ID block,
// at most an eighth of the free capacity, at least 16 or none. The rules
// for users:
//
//   - Durability: the job is in Redis when Add returns, as any job is (the
//     same persistence applies).
//   - Order: the queue has one inbox at a time, so jobs keep the order their
//     Adds returned in, within a process and across processes. Every script
//     that puts a job at a ready list's tail moves the inbox's jobs to the
//     tails of their ready lists first, all of them: the add scripts, a
//     settle whose job may go back to a ready list (a retry or defer due
//     now, the rerun of a key), promotion of due jobs (so a Resume's held
//     jobs and scheduled jobs coming due too), Cancel, Purge and the admin
//     API. Claim and the rescue janitor move a batch of 1000 per call
//     besides (a rescued job goes back to the head of its list, where it
//     was). A job in the inbox is claimed before any job of its priority
//     added or requeued after it. A push repeated after a lost reply leaves
//     one job.
//   - Priorities: an entry names its priority by label, so processes that
//     list different priorities may share a queue: a job goes to its
//     priority's list whichever process moves it.
//   - Counting: Stats and the admin API's Counts, List and Get move the
//     inbox's jobs first and see them; Len sees them from the next script
//     call or fleet refresh of the process (at most WithPollInterval).
//   - Capacity: permits out count against the capacity. An Add that would
//     pass it with permits out revokes them all (the inbox's jobs move, the
//     inbox is deleted, and the next grant opens a new one under a name
//     never used before), so ErrQueueFull is returned exactly when the
//     queue is full. A process that stopped or died with permits leaves
//     them counted until that revoke; its permits never reach a later
//     inbox.
//   - Wake-up: a push that finds the inbox empty asks the process's waker
//     to push the wake-up token, off the caller's path: a waiting Claim
//     wakes one round trip later than after a script's Add. A token lost
//     to an outage delays the Claim until the poll; the job is not lost.
//   - Redis lost its data (a restart without persistence): the inbox and
//     the permits went with it; the next push finds no inbox and the job
//     takes the add-one script, which finds the ID block lost and takes a
//     new one, as any Add does.
//   - Connections: on a plain *redis.Client with a pool of 4 or more, a
//     lone producer's pushes keep one connection of the pool between them
//     (go-redis checks each connection it takes from the pool with a
//     system call of its own), and give it back 100 ms after the last
//     push and at Close. A push whose connection fails is sent again
//     through the pool, as go-redis retries a command on another
//     connection. Cluster and Ring clients take the pool every time.
//
// The inbox, the seen bitmaps its jobs need and the ready lists of
// priorities a process does not serve are reached by name: the scripts
// declare them in KEYS, learnt from the first call that needs them (which
// fails before any write, naming them, and runs again), so scripts stay
// Cluster-safe.
//
// # Claiming and waiting
//
// Claim tries the shards in priority order (weighted priorities: from the
// shard of the priority whose turn it is in this process's weighted
// order, and within a shard the claim script takes each claim's turn the
// same way). When nothing is ready it
// sleeps, without polling, until a wake-up token arrives (each script that
// makes a job ready pushes one onto the shard's wake list, which one
// listener per process and shard waits on with BLPOP while some Claim
// sleeps; a token that arrives when no Claim here is left to wake is
// pushed back for another process), until the next scheduled job is due
// (the earliest its own claim calls or any other of its process's claim
// calls and promotions read), or at most WithPollInterval. A due time
// passes with no script run: when no claim call of the process that
// learnt it took the job 5 ms after it, that process promotes it, and
// the promotion's tokens wake the Claims asleep in every process (a
// promotion that finds the jobs taken already doubles the wait before
// the next, up to 100 ms).
// A claimed job holds a lease of WithLeaseTTL that the queue renews with
// Heartbeat. Every process, leader or not, returns jobs whose lease
// expired to the head of their ready list (where they were when claimed),
// or dead-letters them after their last attempt, once every janitor
// interval (WithJanitorInterval; each wait drawn from its second half); a
// lease is rescued once, by whichever process finds it first. So a dead
// process's jobs run again within the lease TTL plus the janitor interval
// and the time a worker takes to claim them, whether or not the leader
// died with it: with the defaults, within the lease TTL plus 2 s. Attempt
// counts started runs, so a rescued job runs next at attempt + 1. A record whose
// payload cannot be decoded is dead-lettered with the error by Claim, which
// goes on to the next job; the queue counts it, keeps the error in
// RecentErrors and calls its OnDead hooks with it (a *queue.DecodeError).
//
// # Clocks
//
// Leases are judged by Redis's clock, not each process's: the claim and
// heartbeat scripts write TIME plus the lease TTL, and the rescue script
// compares expiries with TIME (Redis 5 and later replicate a script's
// effects, so a script may read TIME and then write). A process whose
// clock is minutes ahead therefore does not rescue another's live lease,
// and one whose clock is behind (or ahead) does not stamp leases that
// expire early (or outlive its heartbeats). With WithShard, each shard's
// server judges the leases it stores. The queue's Clock only measures how
// much time passes: a fake clock's Advance moves this process's view of
// lease time forward, so tests expire leases without waiting, while the
// system clock's reading, right or wrong, does not matter. The leader key
// expires by Redis's clock too (PX).
//
// Due times are the queue's Clock's: a job's RunAt is a time the caller
// gave, and each process promotes a job when its own clock reaches it. A
// process whose clock is off by e promotes scheduled jobs e early or late
// (a retry's or deferral's time is computed from the clock of the process
// that ran it), so keep the clocks of a queue's processes in step (NTP)
// when due times must hold to better than their error.
//
// # Leader election
//
// A standby tries SET key owner NX PX ttl every tenth of the TTL, at most
// every half second; the leader renews with a compare-and-extend script
// every third of the TTL and gives up on Close with a compare-and-delete
// script. When the leader dies, another process leads within the TTL
// (WithLeaderTTL, default 10s) plus min(TTL/10, 500ms). A leader whose
// renewal fails keeps leading until its term, counted from before it
// last renewed, ends; pgstore's leader follows the same rules. The leader
// runs the janitor: promoting due jobs (Claim promotes too, in every
// process) and trimming the dead set (WithDeadRetention, WithDeadMax).
// Rescuing expired leases is every process's (above), so a dead leader
// delays no job. Every script is atomic, so two leaders for a moment (a
// paused process) do no harm.
//
// # Priority sharding
//
// WithShard serves a priority from its own Redis, so that a backlog or an
// outage of the low-priority Redis never delays high-priority work on
// another. Each shard has its own keys, IDs (unique across shards: the
// shard is in the ID's low bits), health and fallback state.
// Dedupe by Key and Group, unique windows and the Capacity bound hold per
// shard, so jobs sharing a Key should use priorities served by one shard.
//
// # Unique windows
//
// A job with a UniqueFor window sets its key's mark, a member of the
// queue's "unique" sorted set scored by the end of the window, in the add
// script that accepts it; while the mark stands the add script refuses
// every job with the key (a *queue.DuplicateError) before its other
// checks, so a running key in its window is not coalesced. Windows are
// judged by Redis's TIME, shifted by a fake clock's advances as leases
// are (see Clocks), so every process agrees on them; EnqueueMany's jobs
// go through the same script, an earlier job of a batch opening its
// window for the later ones. Cancel and Purge leave marks; the leader's
// janitor drops expired ones with the dead jobs it trims.
//
// During an outage a window is only local: the fallback (below) keeps
// the windows of the jobs it accepts in this process, and cannot see the
// marks in Redis, so while a shard is down a key in a window in Redis can
// be accepted by the fallback, and a window opened in the fallback does
// not reach Redis with its job when the job is written back.
//
// # Outage fallback
//
// Each shard is health-checked (WithHealthCheck), and any
// command that fails for a connection error switches the shard to a
// bounded in-memory fallback (WithFallback): Add keeps accepting its jobs
// and Claim serves them, in priority order with the jobs of the shards
// that are up. The fallback is the in-memory store itself, so the jobs it
// holds follow the in-memory rules (priority order and FIFO, the schedule,
// pending keys, groups, coalescing, the capacity, due jobs requeued when
// the ready jobs fill it); it cannot see the jobs in Redis. A job whose
// Add may have reached Redis, and one being written back, keeps its key
// from new fallback jobs until Redis has settled it; a job being written
// back no longer holds its group. Completions of jobs claimed from Redis that fail
// during the outage are kept and recorded when Redis answers. Once a ping
// succeeds, the leases of the jobs this process runs from the shard are
// renewed first (heartbeats skip a shard that is down, and an expired
// lease would make a process run the job again), then the jobs the
// fallback has not run are written back to Redis, each exactly once, and
// the shard switches back. Exactly once holds even
// when a reply is lost: every job has its Redis ID before its first write
// (IDs are reserved in blocks) and the add script sets the ID's bit in a
// seen bitmap, so writing a job twice is a no-op; a job whose Add may have
// reached Redis is never run from the fallback, only settled with Redis.
// A job is stored only under an ID of a block that Redis knows as the
// caller's: Redis restarted without persistence (or from an older
// snapshot) has lost the ID counter and counts again from where it
// restarted, and a job of a block reserved before is refused and given an
// ID of a new block, so that no two jobs share an ID and none is taken for
// a repeated write of another. Job IDs can so change between Add and the
// write-back, as they do for jobs the fallback accepted without a Redis
// ID.
// Stats reports Healthy and, in Detail, the state of each shard and of the
// fallback. For a fast switch give the client short dial and read timeouts.
//
// During an outage go-redis itself logs each failed dial of its pool
// ("redis: connection pool: failed to dial after 5 attempts") through its
// process-wide logger, to stderr by default. The store does not change
// that logger, a setting of the whole process; a program that wants those
// lines elsewhere calls redis.SetLogger once at start. New's own check
// dials a plain client once itself, so a wrong address prints nothing.
//
// # Durability
//
// What a Redis restart keeps is what Redis persisted: with AOF and
// appendfsync everysec, every job whose Add returned more than about a
// second before the crash, with its state (ready, scheduled, running with
// its lease, dead); a job claimed when Redis died runs again after its
// lease expires unless its completion reached Redis. A process crash loses
// nothing in Redis: its running jobs run again after their leases expire.
// A process that crashes during an outage loses the jobs its fallback held
// and the completions it kept (those jobs run again). Jobs accepted during
// an outage are in memory only until written back. Scheduled jobs, the
// dead set and the per-ID seen bits and block registrations (24 hours)
// live in Redis as well. Every job whose Add returned nil after Redis lost
// its data (a restart without persistence) runs: the jobs lost are those
// that were in Redis at the crash.
//
// # Differences from the in-memory store
//
//   - Drain does not wait for the backlog, which other processes share:
//     Claim returns the fallback's ready jobs, then storekit.ErrDrained.
//   - Len is the ready count as last seen by this process's script calls
//     and re-read every poll interval (at most 1 s) from Start, idle or not,
//     and counts every process's jobs.
//   - A fleet: the processes of a queue share one admission bucket
//     (TakeTokens, a GCRA script on TIME) and count each other
//     (Processes, a presence set renewed with the fill), so that
//     queue.Admit admits one bucket's worth for the fleet and
//     queue.ScaleByDepth scales each process on its share of the depth;
//     they hold a target's concurrency slots in a sorted set per target
//     (storekit.SlotStore), so that a WithTargetConcurrency limit holds for the
//     fleet; docs/OPERATIONS.md ("Fleet state") lists what is shared.
//   - Delivery is at-least-once: a job whose process dies, or whose lease
//     expires, runs again. A job rescued so keeps its key, and a rerun
//     coalesced while it ran keeps waiting behind it: Cancel of the key
//     then ends both and reports 2. The queue names running jobs by ID, so
//     when this process claims again a job whose earlier run here lost its
//     lease, that run is not cancelled; its outcome is refused with
//     ErrLeaseLost.
//   - Dedupe by Key and Group, and the Capacity bound, hold per shard.
//   - Capacity bounds Add and promotion. A retry or deferral due at once,
//     a job rescued from an expired lease and a rerun released when its
//     key's job ends go to their ready list even when the ready jobs are at
//     capacity (the in-memory store puts them in the schedule for
//     RequeueDelay), so Ready can pass Capacity by up to the number of
//     running jobs.
//   - Times are kept in milliseconds.
//   - Dead jobs stay in the dead set for the retention (WithDeadRetention),
//     at most WithDeadMax of them.
//   - During an outage the fallback's dedupe and groups see only the jobs
//     it holds: a job with the key of one that runs from Redis can run at
//     the same time, and is dropped at write-back (counted cancelled) if the
//     key is still pending in Redis then.
package redisstore
