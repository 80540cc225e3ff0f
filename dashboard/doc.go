// Package dashboard serves a queue's dashboard in the browser: one page
// with live depth, throughput and run time over the last minutes, the
// workers, the ready jobs per priority, the targets with their health and
// actions, the next scheduled jobs, the periodic jobs (next and last
// period, the last run's outcome) and the recent errors. The page, its
// script and its style are embedded; it loads nothing from elsewhere and
// needs no build step.
//
// Mount it as you mount the queue's StatsHandler, at a path that ends in
// a slash, with the prefix stripped:
//
//	q, err := queue.New(handle)
//	...
//	dash, err := dashboard.New(q, dashboard.WithAdmin(q.Admin()))
//	...
//	mux.Handle("/dashboard/", http.StripPrefix("/dashboard", requireAdmin(dash)))
//
// A dashboard of a queue charts run times and lists healthy targets
// (which the queue's Stats leaves out) from the queue's own counters:
// its default Recorder (NewRecorder(q)) reads the workers' sample of run
// times (queue.Queue.RunTimes) and the queue's table of targets
// (queue.Queue.TargetNames) when a page polls, which costs the queue no
// observer and a run nothing measurable (docs/benchmarks.md). A zero
// Recorder fed by queue.WithObserver(rec.Observe) and given with
// WithRecorder still works: it times every run exactly instead, at the
// cost of an observer on every job.
//
// # Authentication
//
// The dashboard has no login of its own: it shows whatever the queue's
// Stats holds (never payloads) to whoever reaches it. Put it behind the
// host's own authentication by wrapping the Handler in a handler that
// checks the request first and answers 401 or 403 before the dashboard
// sees it, as requireAdmin does above and the package example shows. Do
// not mount it unwrapped on a listener others can reach.
//
// # Actions
//
// The dashboard is read-only unless the host passes WithActions(true):
// then the page can suspend, resume, disable and enable a target (and,
// with WithAdmin, retry and delete dead jobs and pause and resume the
// queue; the page asks the operator to confirm a delete, which cannot be
// undone). Actions are POSTs with a
// JSON body and are refused (403) when cross-origin by their
// Sec-Fetch-Site or Origin header (net/http's CrossOriginProtection), or
// without the handler's secret token in the TokenHeader header; the page
// reads the token from its own same-origin state endpoint, which other
// origins cannot read. The token is made at random by New and lives as
// long as the Handler. Enable actions only behind authentication that
// admits the people allowed to act.
//
// # What the browser is told
//
// Keys, target names and error texts come from whoever enqueues jobs and
// are treated as hostile. The JSON endpoints escape <, > and & and are
// served as application/json with X-Content-Type-Options: nosniff; the
// page puts every string in as text, never as markup; and every response
// carries a Content-Security-Policy that allows only the page's own
// script, style and requests (no inline script, no other origin) and
// forbids framing (frame-ancestors 'none', X-Frame-Options: DENY).
//
// # The chart
//
// The Handler keeps a bounded ring of samples (WithHistory, default 300)
// for the chart, taken when a page polls and at most one per interval
// (WithInterval, default 1 s): five minutes at the defaults. Sampling on
// demand needs no goroutine, so nothing runs, nothing costs the queue and
// nothing needs stopping while nobody watches; every viewer shares the
// one ring, so a page opened late shows the minutes others watched, and a
// stretch nobody watched is drawn as a gap. Throughput is the change of
// Stats' Done counter between samples; run time is the mean (and the
// longest) of the runs that ended in between, from the Recorder (of
// the runs the queue's workers sampled, by default), or, for a Source
// that keeps no run times, of the runs the admin API sampled (WithAdmin). History
// that must survive while nobody watches belongs in the queue's
// Prometheus metrics.
//
// # Dead jobs, job detail and pause
//
// With WithAdmin(q.Admin()) the page lists the dead jobs (retry and
// delete them when actions are enabled), shows one job's detail and the
// jobs per state, and shows whether the queue is paused (pause and resume
// it when actions are enabled). It never shows payloads. Without it the
// section says what is missing, and the job endpoints answer 501 Not
// Implemented.
//
// The jobs per state come from the admin API's Counts, which reads every
// job on pgstore: the handler counts in the background, once for every
// open tab, when the last count is WithCountsEvery old (30 s by default)
// or a retry or delete changed the jobs, and each poll answers at once
// with the last count and its age (states_counted_at, states_age_ms),
// which the page shows beside a "count now" button (GET api/counts).
// The other figures come from the queue's Stats, which a poll takes
// itself while it is quick; once one took 20 ms or more (pgstore counts
// the jobs not ended: 0.9 s at a million) they are taken in the
// background, one at a time and at most every half interval, and polls
// answer with the last snapshot and its age (stats_age_ms, shown beside
// "updated" when older than the interval).
//
// # Long and hidden text
//
// Keys, targets and errors come from the queue's users. The lists and
// api/state carry at most 1 KiB of each (a listed job says truncated),
// the job's detail all of it; a table cell shows at most 120 characters,
// the detail the whole value in a panel where the user is; control and
// format characters (U+202E and the other bidirectional controls) are
// shown escaped, as \u202e.
package dashboard
