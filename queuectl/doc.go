// Queuectl inspects and acts on the jobs of a queue kept in PostgreSQL
// (pgstore), Redis (redisstore) or a SQLite file (sqlitestore), from the
// command line, with no queue
// running in it: it opens the store and uses the admin API (package
// admin) over it, as the queue's own Admin does.
//
// Install it with
//
//	go install github.com/queuekit/queue/queuectl@latest
//
// Usage:
//
//	queuectl (--pg URL | --redis ADDR | --sqlite FILE) [--queue NAME] [--schema S | --prefix P] <command> [flags]
//
// The global flags come before the command:
//
//	--pg URL          a pgstore database, e.g. postgres://app@db:5432/app
//	--redis ADDR      a redisstore server: host:port, or redis://[user:pass@]host:port/db
//	--sqlite FILE     a sqlitestore database file (migrated by the program that uses it)
//	--queue NAME      the queue's name, as given to queue.WithName (default "default")
//	--schema S        pgstore.WithSchema's schema (default: the search_path's)
//	--prefix P        redisstore.WithPrefix's prefix (default "queue")
//	--priorities L    the queue's levels as name=weight, highest first, when it
//	                  sets queue.WithPriorities (default high=0,normal=5,low=10)
//	--timeout D       how long to wait for the server (default 10s)
//
// Commands (their flags may come before or after their arguments):
//
//	stats [-o json]                 jobs per state, ready jobs per priority, pending keys, paused
//	                                (on Redis: done and cancelled are "not kept")
//	ls --state S [filters]          a page of the jobs in state S (ready, scheduled, running,
//	   [--oldest] [--limit N]       dead, done, cancelled), newest first; filters: --priority,
//	   [--after CURSOR] [--payload] --target, --key-prefix; the last line names the next
//	   [-o json]                    page's cursor ("next page: --after ..."; "next" in JSON)
//	                                the filters are tested on each job of the state in page
//	                                order, at most 10 000 jobs per call: ls follows up to 20
//	                                calls to fill the page, then prints what it found, a
//	                                "partial page" line and the cursor to go on from
//	show ID | --key K [--payload]   one job; --key finds the pending or running job with
//	   [-o json]                    that key, or else the newest ended one (Redis keeps
//	                                dead jobs only: no done or cancelled ones)
//	retry ID                        make a dead (or cancelled) job ready now, attempts reset
//	retry --state dead [filters]    the same for every matching job; asks first on a
//	   [--yes]                      terminal, and needs --yes when stdin is not one
//	rm ID                           delete a job that is not running (its key is freed)
//	cancel ID                       cancel a queued or scheduled job; a running one has its
//	                                context cancelled on whichever process runs it
//	pause, resume                   stop (and restart) claims on every process of the queue;
//	                                enqueues continue while paused
//	targets [list | suspend NAME [--for D] | resume NAME | disable NAME [--reason R] | enable NAME]
//	   [-o json]                    the targets' health kept in the store for every process
//	                                of the queue, and actions on it (see Targets below)
//	migrate                         create or update pgstore's tables (pgstore.Migrate);
//	                                PostgreSQL only: Redis needs none
//
// Payloads are shown only with --payload, as the store's codec encoded
// them (JSON unless the queue sets another codec); in JSON output a
// payload that is not JSON is given as payload_base64. Keys, targets and
// error texts come from the queue's users: control characters (C0, C1)
// and format characters (bidirectional overrides such as U+202E) in them
// are printed escaped, never sent to the terminal: as Go escapes (\x1b,
// \u202e) in tables and messages, as JSON escapes (\u001b, \u202e) with
// -o json.
//
// # Exit status
//
// 0 when the command did what it says; 1 when it could not, with one
// line on stderr naming the problem: a server that cannot be reached, a
// schema that is not migrated ("run queuectl migrate"), an unknown queue,
// a job that is not found or not in a state that allows the action; 2 for
// a mistake on the command line (an unknown command or flag, a malformed
// ID, URL or cursor).
//
// # Targets
//
// targets works on the target health that pgstore and redisstore keep
// for every process of the queue (storekit.TargetStore): list shows the
// targets that are disabled, suspended or whose circuit breaker is not
// closed; suspend NAME suspends the target for --for (default 5m, the
// library's default WithSuspend: queuectl does not know the queue's
// option); resume NAME ends its suspension and closes its breaker, but
// leaves it disabled; disable NAME records --reason (at most 256 bytes;
// longer ones are cut and end in "..."); enable NAME ends the disabling,
// but not a suspension. Each running process of the queue applies the
// change as soon as the store announces it, and within a second (its
// reload) if the announcement is lost. The failure counts and the running
// and parked jobs are each process's own: queuectl shows them as 0 (a
// queue's own Admin, as on its dashboard, shows its process's).
//
// Each action reads the target's entry, changes it and writes it back:
// it is not atomic against the running processes, which write the same
// entry when the target's health changes there (a 429 suspends it again,
// a breaker opens), and the last write wins. A suspension's end is the
// time on queuectl's host plus --for, and each process compares it with
// its own clock: a host clock ahead of the processes' lengthens the
// suspension by the skew, one behind shortens it.
//
// # Unknown queues
//
// A typo in --queue, --schema or --prefix would otherwise show an empty
// queue, so queuectl refuses a queue it finds no sign of. On PostgreSQL
// the queue must have a job in any state (ended jobs count until
// retention prunes them), a leader row (a process of the queue runs) or
// a control row (it was once paused); on Redis, its ID sequence
// ({prefix:name}:ids, kept once the queue has had a job), its job records
// or its dead letters. A queue that has never had a job is therefore
// unknown, even to pause.
package main
