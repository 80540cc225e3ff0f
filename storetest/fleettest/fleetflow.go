// Package fleettest holds what the multi-process fleet tests of the
// durable stores (pgstore, redisstore, and a store of another module)
// share: the helper-process
// protocol (Proc, StartHelper, Commands: the store's test binary re-run,
// driven over stdin and stdout), the target-health test (TargetHealth,
// ServeHealth), the check of the periodic test's runs (CheckPeriodicRuns),
// and the whole flow of a fleet of queue managers (TestFleetWholeFlow).
//
// In the whole flow, each manager is an OS process of the store's test
// binary, re-run (StartProc), that serves one queue with workers on the
// store, leader election on (Serve). RunFlow drives the flow:
//
//   - two managers start; the first leads, the second stands by;
//   - jobs of two priorities run, at once and scheduled to become due
//     from before the first kill until after the failover;
//   - the standby is SIGKILLed while it runs jobs: the janitor (lease
//     rescue, in every process) runs them again once their leases expire,
//     and a replacement starts;
//   - the leader is SIGKILLed while it runs jobs: the remaining manager
//     takes the leadership (Stats.Leader, and the store's leadership
//     record names it), the dead leader's jobs run again, and another
//     replacement starts.
//
// Every run is recorded in the store's server when it begins (payload,
// ID, attempt, pid, time), and every completion and lease rescue by the
// queue's observer once the store recorded it. The jobs in flight at a
// kill are the leases the killed process held, watched from the kill on.
// RunFlow then checks that every job ran; each exactly once, except the
// jobs in flight at a kill, which were rescued once their leases expired
// and ran once more (a claim never recorded as a run, made just before
// the kill, shows as an attempt number skipped).//
// Like storetest, it is a test kit: its functions may change in a minor
// release when the tests do (see docs/RELEASING.md).
package fleettest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/storekit"
)

// The flow's parameters. The lease and leader TTL are short, so that the
// flow is quick, and well above a heartbeat's delay on a loaded machine,
// so that no job of a live process loses its lease.
const (
	LeaseTTL  = 2 * time.Second
	LeaderTTL = 2 * time.Second
	Janitor   = 100 * time.Millisecond // the janitor interval
	Workers   = 8                      // per manager
	Holds     = Workers + 1            // jobs 0..Holds-1 are held at attempt 1: each of two managers holds one at least
	Work      = 20 * time.Millisecond  // what every other run takes
)

// The priorities the jobs use, two of the queue's default ones: even
// payloads High, odd ones Low.
const (
	High = "high"
	Low  = "low"
)

// The lists the managers record in (Serve's record function).
const (
	Starts  = "starts"  // "payload id attempt pid unixnano", when a run begins
	Held    = "held"    // "payload pid", when a held job is held
	Done    = "done"    // "id pid", on EventDone
	Rescued = "rescued" // "id attempt pid unixnano", on EventRescued
	Odd     = "odd"     // any retry, dead letter, cancellation, drop, requeue or deferral
)

// Lists names the record lists.
var Lists = []string{Starts, Held, Done, Rescued, Odd}

// Serve is the body of a manager process: it runs a queue named "q" on s
// with Workers workers, recording with record, prints READY, and answers
// the commands on stdin, "<n> <command> <args>", with "R <n> <answer>" on
// stdout until stdin ends; then it shuts the queue down. The commands are
// who (s's worker ID and the pid), leader (Stats.Leader), idle (nothing
// ready, scheduled, running or waiting) and add
// "payload,priority,runAtUnixMs ..." (0: at once). The store must have
// been made with LeaseTTL, LeaderTTL and the Janitor interval.
func Serve(t *testing.T, s storekit.Store[int], owner string, record func(list, line string) error) {
	ctx := context.Background()
	pid := os.Getpid()
	rec := func(list, format string, args ...any) error { return record(list, fmt.Sprintf(format, args...)) }
	handler := func(ctx context.Context, j queue.Job[int]) error {
		if err := rec(Starts, "%d %d %d %d %d", j.Payload, j.ID, j.Attempt, pid, time.Now().UnixNano()); err != nil {
			return err
		}
		if j.Payload < Holds && j.Attempt == 1 {
			if err := rec(Held, "%d %d", j.Payload, pid); err != nil {
				return err
			}
			<-ctx.Done() // held until the process is killed
			return ctx.Err()
		}
		work := time.NewTimer(Work)
		defer work.Stop()
		select {
		case <-work.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	observe := func(ev queue.Event) {
		switch ev.Kind {
		case queue.EventDone:
			_ = rec(Done, "%d %d", ev.JobID, pid)
		case queue.EventRescued:
			_ = rec(Rescued, "%d %d %d %d", ev.JobID, ev.Attempt, pid, time.Now().UnixNano())
		case queue.EventRetried, queue.EventDead, queue.EventCancelled, queue.EventDropped, queue.EventRequeued, queue.EventDeferred:
			_ = rec(Odd, "%s job %d pid %d: %v", ev.Kind, ev.JobID, pid, ev.Err)
		}
	}
	q, err := queue.NewWithStore(s, handler, queue.WithName("q"), queue.WithWorkers(Workers, Workers),
		queue.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))), queue.WithObserver(observe))
	if err != nil {
		t.Fatal(err)
	}
	err = RunHelper(t, q, func(cmd, arg string) string {
		switch cmd {
		case "who":
			return fmt.Sprintf("%s %d", owner, pid)
		case "leader", "idle":
			st, err := s.Stats(ctx)
			switch {
			case err != nil:
				return "error " + err.Error()
			case cmd == "leader":
				return strconv.FormatBool(st.Leader)
			default:
				return strconv.FormatBool(st.Ready+st.Scheduled+st.Running+st.Waiting == 0)
			}
		case "add":
			return add(ctx, q, arg)
		default:
			return "unknown command " + cmd
		}
	})
	if err != nil {
		t.Fatal(err)
	}
}

// add enqueues the jobs "payload,priority,runAtUnixMs ..." and answers ok
// or the first error.
func add(ctx context.Context, q *queue.Queue[int], specs string) string {
	for _, spec := range strings.Fields(specs) {
		var p int
		var prio string
		var at int64
		if _, err := fmt.Sscanf(strings.ReplaceAll(spec, ",", " "), "%d %s %d", &p, &prio, &at); err != nil {
			return fmt.Sprintf("error %q: %v", spec, err)
		}
		j := queue.Job[int]{Payload: p, Priority: prio}
		if at > 0 {
			j.RunAt = time.UnixMilli(at)
		}
		if err := q.Enqueue(ctx, j); err != nil {
			return fmt.Sprintf("error job %d: %v", p, err)
		}
	}
	return "ok"
}

// awaitLeader asks the manager until it leads, and returns when it did:
// leadership lives in the store's server, taken by the manager's own
// loop, so it is polled (watching the killed managers' leases meanwhile).
func (f *Flow) awaitLeader(t *testing.T, p *Proc, within time.Duration) time.Time {
	t.Helper()
	var at time.Time
	if !poll(within, func() bool {
		f.watch(t)
		at = time.Now()
		return p.Ask(t, "leader") == "true"
	}) {
		t.Fatalf("manager %s (pid %d) did not lead within %v", p.Owner, p.PID, within)
	}
	return at
}

// poll checks cond every 10 ms until it holds or within passes, and
// reports whether it held.
func poll(within time.Duration, cond func() bool) bool {
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			return cond()
		case <-tick.C:
		}
	}
	return true
}

// Driver is what RunFlow needs of a store's test.
type Driver struct {
	// Start starts a manager (StartProc on the test's helper).
	Start func(t *testing.T) *Proc
	// Read returns the records by list, each in the order written.
	Read func(t *testing.T) map[string][]string
	// Leases returns the claims owner holds a lease of, with their expiry
	// by the server's clock.
	Leases func(t *testing.T, owner string) map[Ref]time.Time
	// Leader returns the worker ID the store's leadership record names.
	Leader func(t *testing.T) string
	// WhileHeld, if set, checks the store while the held jobs are held,
	// and nothing else runs.
	WhileHeld func(t *testing.T, f *Flow)
	// Ended, if set, checks the store once every job ended.
	Ended func(t *testing.T, f *Flow, r Records)
}

// Job is a job the test enqueued.
type Job struct {
	Prio  string    // its priority label
	RunAt time.Time // zero: at once
}

// Run is one recorded run of a job.
type Run struct {
	ID      int64     // the job's ID
	Attempt int       // the run's attempt number
	PID     int       // the process that ran it
	At      time.Time // when the run began
}

// Ref names one claim of a job: its ID and attempt.
type Ref struct {
	ID      int64 // the job's ID
	Attempt int   // the claim's attempt number
}

// Lease is a lease a killed manager held.
type Lease struct {
	PID    int       // the killed manager
	Expiry time.Time // by the server's clock
}

// Rescue is a recorded rescue.
type Rescue struct {
	PID int       // the process whose janitor rescued the job
	At  time.Time // when
}

// Records is what the managers recorded.
type Records struct {
	Runs    map[int][]Run         // by payload, by attempt
	Done    map[int64]map[int]int // by job ID, by pid
	Rescued map[Ref]Rescue        // the rescues, by claim
	Odd     []string              // records that fit no expectation, to report
	NRuns   int                   // runs recorded in all
}

// Flow is the test's account of the jobs it enqueued, the managers it
// killed and the leases they held.
type Flow struct {
	Jobs   map[int]Job       // the jobs enqueued, by payload
	Killed map[int]time.Time // kill time by pid
	Leases map[Ref]Lease     // the leases the killed managers held, by claim
	dead   []*Proc           // the killed managers, whose leases are watched
	d      Driver
}

// RunFlow drives the whole flow with d and checks it.
func RunFlow(t *testing.T, d Driver) {
	t.Helper()
	began := time.Now()
	f := &Flow{Jobs: map[int]Job{}, Killed: map[int]time.Time{}, Leases: map[Ref]Lease{}, d: d}

	// Two managers: the first leads, the second stands by.
	m1 := d.Start(t)
	f.awaitLeader(t, m1, 10*time.Second)
	m2 := d.Start(t)
	f.equal(t, "false", m2.Ask(t, "leader"), "the second manager leads too")
	f.equal(t, m1.Owner, d.Leader(t), "the leadership record")

	// The held jobs: both managers run them (8 workers each, 9 jobs) and
	// hold them until they are killed.
	f.add(t, m1, 0, Holds, nil)
	heldBy := map[int]int{}
	if !poll(30*time.Second, func() bool { return len(d.Read(t)[Held]) == Holds }) {
		t.Fatalf("held jobs: %q, want %d", d.Read(t)[Held], Holds)
	}
	var m2held []int
	for _, h := range d.Read(t)[Held] {
		var p, pid int
		if _, err := fmt.Sscanf(h, "%d %d", &p, &pid); err != nil {
			t.Fatalf("%q: %v", h, err)
		}
		heldBy[p] = pid
		if pid == m2.PID {
			m2held = append(m2held, p)
		}
	}
	if len(m2held) == 0 {
		t.Fatalf("the standby holds no job (held by pid: %v)", heldBy)
	}
	if d.WhileHeld != nil {
		d.WhileHeld(t, f)
	}

	// Jobs now and scheduled over the next 8.5 s, then the standby is
	// killed mid-job; a replacement starts and stands by.
	now := time.Now()
	f.add(t, m1, 100, 200, nil)
	f.add(t, m1, 1000, 80, func(i int) time.Time { return now.Add(500*time.Millisecond + time.Duration(i)*100*time.Millisecond) })
	f.kill(t, m2)
	m3 := d.Start(t)
	f.watch(t)
	f.equal(t, "false", m3.Ask(t, "leader"), "the replacement leads while the leader lives")
	// The killed manager's jobs are rescued once their leases expired,
	// and its held jobs run again; leases live in the server, and runs
	// are recorded there: polled. (The leader, killed next, may be the
	// rescuer: its records must be written before it dies.)
	f.await(t, LeaseTTL+20*time.Second, "the killed standby's jobs to be rescued and its held jobs to run again", func(r Records) bool {
		if len(f.d.Leases(t, m2.Owner)) > 0 {
			return false
		}
		for _, p := range m2held {
			if !slices.ContainsFunc(r.Runs[p], func(run Run) bool { return run.Attempt == 2 }) {
				return false
			}
		}
		return true
	})
	f.equal(t, "true", m1.Ask(t, "leader"), "the leader after the standby's death")

	// Jobs now, then the leader is killed mid-job; jobs scheduled from
	// the kill on, over the time without a leader and after. The
	// remaining manager takes the leadership within the leader TTL (and
	// its standby poll); another replacement starts and stands by.
	f.add(t, m1, 300, 200, nil)
	f.kill(t, m1)
	killedLeader := f.Killed[m1.PID]
	f.add(t, m3, 2000, 60, func(i int) time.Time { return killedLeader.Add(time.Duration(i) * 50 * time.Millisecond) })
	took := f.awaitLeader(t, m3, LeaderTTL+5*time.Second).Sub(killedLeader)
	f.equal(t, m3.Owner, d.Leader(t), "the leadership record after the failover")
	m4 := d.Start(t)
	f.watch(t)
	f.equal(t, "false", m4.Ask(t, "leader"), "the second replacement leads too")
	f.equal(t, "true", m3.Ask(t, "leader"), "the new leader after the replacement started")
	f.watch(t)
	now = time.Now()
	f.add(t, m4, 500, 100, nil)
	f.add(t, m4, 3000, 20, func(i int) time.Time { return now.Add(time.Second + time.Duration(i)*50*time.Millisecond) })

	// Every job ends: the store holds none, and every job's last run is
	// recorded done or ran in a killed manager. Both live in the server:
	// polled.
	f.await(t, 30*time.Second, "every job to end", func(r Records) bool {
		return f.settled(r) && m3.Ask(t, "idle") == "true" && f.settled(f.read(t))
	})
	stop(t, m3)
	stop(t, m4)
	r := f.read(t)

	f.check(t, r)
	var rerun []time.Duration
	for p := range Holds {
		runs := r.Runs[p]
		if len(runs) != 2 || runs[0].PID != heldBy[p] || runs[0].Attempt != 1 || runs[1].Attempt != 2 {
			t.Errorf("held job %d (held by pid %d): runs %+v; want attempt 1 there, then attempt 2", p, heldBy[p], runs)
			continue
		}
		rerun = append(rerun, runs[1].At.Sub(f.Killed[heldBy[p]]))
	}
	if d.Ended != nil {
		d.Ended(t, f, r)
	}
	leaderless := 0
	for _, j := range f.Jobs {
		if j.RunAt.After(killedLeader) && j.RunAt.Before(killedLeader.Add(took)) {
			leaderless++
		}
	}
	if leaderless == 0 {
		t.Errorf("no job was due while no process led (%v after the leader's kill)", took)
	}
	rescuers := map[int]int{}
	for _, res := range r.Rescued {
		rescuers[res.PID]++
	}
	if len(rerun) == 0 {
		return
	}
	t.Logf("%d jobs, %d runs; %d leases held by the killed managers, %d of them rescued (by pid %v), %d completed at the kill; "+
		"held jobs ran again %v..%v after the kill (lease %v); failover %v after the leader's kill (leader TTL %v); "+
		"%d scheduled jobs due without a leader; took %v",
		len(f.Jobs), r.NRuns, len(f.Leases), len(r.Rescued), rescuers, f.completedAtKill(r),
		slices.Min(rerun).Round(time.Millisecond), slices.Max(rerun).Round(time.Millisecond), LeaseTTL,
		took.Round(time.Millisecond), LeaderTTL, leaderless, time.Since(began).Round(time.Millisecond))
}

// stop stops the manager, which must exit 0.
func stop(t *testing.T, m *Proc) {
	t.Helper()
	if code := m.Stop(t); code != 0 {
		t.Fatalf("manager %s exited %d", m.Owner, code)
	}
}

func (f *Flow) equal(t *testing.T, want, got, what string) {
	t.Helper()
	if got != want {
		t.Fatalf("%s: %q, want %q", what, got, want)
	}
}

// add enqueues n jobs from payload first through m, even payloads High,
// odd ones Low; at gives the run-at time of the i-th (nil: at once).
func (f *Flow) add(t *testing.T, m *Proc, first, n int, at func(i int) time.Time) {
	t.Helper()
	var b strings.Builder
	b.WriteString("add")
	for i := range n {
		p := first + i
		j := Job{Prio: High}
		if p%2 == 1 {
			j.Prio = Low
		}
		var ms int64
		if at != nil {
			ms = at(i).UnixMilli()
			j.RunAt = time.UnixMilli(ms)
		}
		f.Jobs[p] = j
		fmt.Fprintf(&b, " %d,%s,%d", p, j.Prio, ms)
	}
	f.equal(t, "ok", m.Ask(t, b.String()), "add")
}

// kill SIGKILLs the manager, waits for it to exit, and starts watching
// the leases it held.
func (f *Flow) kill(t *testing.T, m *Proc) {
	t.Helper()
	f.Killed[m.PID] = m.Kill(t)
	f.dead = append(f.dead, m)
	f.watch(t)
}

// watch reads the leases the killed managers hold and notes them: they
// were in flight at the kill. A manager's leases are read from right
// after its kill, at every poll of the flow, until they are gone, so
// that the leases a command sent just before the kill took are seen too
// (the server may run the command after a first read; its lease then
// lives a lease TTL from then, longer than any gap between two reads).
func (f *Flow) watch(t *testing.T) {
	t.Helper()
	for _, m := range f.dead {
		for ref, exp := range f.d.Leases(t, m.Owner) {
			if l, ok := f.Leases[ref]; !ok || exp.After(l.Expiry) {
				f.Leases[ref] = Lease{PID: m.PID, Expiry: exp}
			}
		}
	}
}

// read reads and parses the records.
func (f *Flow) read(t *testing.T) Records {
	t.Helper()
	lists := f.d.Read(t)
	r := Records{Runs: map[int][]Run{}, Done: map[int64]map[int]int{}, Rescued: map[Ref]Rescue{}, Odd: lists[Odd]}
	scan := func(l, format string, args ...any) {
		if _, err := fmt.Sscanf(l, format, args...); err != nil {
			t.Fatalf("record %q: %v", l, err)
		}
	}
	for _, l := range lists[Starts] {
		var p int
		var run Run
		var ns int64
		scan(l, "%d %d %d %d %d", &p, &run.ID, &run.Attempt, &run.PID, &ns)
		run.At = time.Unix(0, ns)
		r.Runs[p] = append(r.Runs[p], run)
		r.NRuns++
	}
	for _, runs := range r.Runs {
		slices.SortFunc(runs, func(a, b Run) int { return a.Attempt - b.Attempt })
	}
	for _, l := range lists[Done] {
		var id int64
		var pid int
		scan(l, "%d %d", &id, &pid)
		if r.Done[id] == nil {
			r.Done[id] = map[int]int{}
		}
		r.Done[id][pid]++
	}
	for _, l := range lists[Rescued] {
		var ref Ref
		var res Rescue
		var ns int64
		scan(l, "%d %d %d %d", &ref.ID, &ref.Attempt, &res.PID, &ns)
		res.At = time.Unix(0, ns)
		if prev, dup := r.Rescued[ref]; dup {
			t.Errorf("job %d rescued twice at attempt %d: by pids %d and %d", ref.ID, ref.Attempt, prev.PID, res.PID)
		}
		r.Rescued[ref] = res
	}
	return r
}

// await reads the records until cond holds or within passes.
func (f *Flow) await(t *testing.T, within time.Duration, what string, cond func(Records) bool) {
	t.Helper()
	var r Records
	if !poll(within, func() bool {
		f.watch(t)
		r = f.read(t)
		if len(r.Odd) > 0 {
			t.Fatalf("unexpected events: %q", r.Odd)
		}
		return cond(r)
	}) {
		f.check(t, r) // names what is missing
		t.Fatalf("timed out after %v waiting for %s", within, what)
	}
}

// settled reports whether every job ran and its last run is recorded
// done, or ran in a killed manager (which completed it or lost it: the
// store tells which).
func (f *Flow) settled(r Records) bool {
	for p := range f.Jobs {
		runs := r.Runs[p]
		if len(runs) == 0 {
			return false
		}
		last := runs[len(runs)-1]
		if _, killed := f.Killed[last.PID]; !killed && r.Done[last.ID][last.PID] == 0 {
			return false
		}
	}
	return true
}

// completedAtKill counts the jobs whose last run was in a killed manager:
// it completed them just before it died (and did not record it done).
func (f *Flow) completedAtKill(r Records) int {
	n := 0
	for _, runs := range r.Runs {
		last := runs[len(runs)-1]
		if _, killed := f.Killed[last.PID]; killed && r.Done[last.ID][last.PID] == 0 {
			n++
		}
	}
	return n
}

// check asserts, once every job ended, that every job ran, exactly once
// unless it was in flight at a kill. A claim is in flight at a kill when
// the killed manager held its lease after the kill. Every claim of a job
// but its last was in flight at a kill, and every rescue was of such a
// claim; the job was rescued once for each claim but its last; each run
// after a lost claim began once the lost lease had expired; the job
// completed once (or its last run was in a killed manager, which
// completed it before it died). A scheduled job never began before it
// was due.
func (f *Flow) check(t *testing.T, r Records) {
	t.Helper()
	if len(r.Odd) > 0 {
		t.Fatalf("unexpected events: %q", r.Odd)
	}
	for ref, res := range r.Rescued {
		if _, ok := f.Leases[ref]; !ok {
			t.Errorf("job %d rescued at attempt %d by pid %d, but no killed manager held it", ref.ID, ref.Attempt, res.PID)
		}
	}
	rescues := map[int64]int{}
	for ref := range r.Rescued {
		rescues[ref.ID]++
	}
	for _, p := range slices.Sorted(maps.Keys(f.Jobs)) {
		j := f.Jobs[p]
		runs := r.Runs[p]
		if len(runs) == 0 {
			t.Errorf("job %d (%s) never ran", p, j.Prio)
			continue
		}
		id := runs[0].ID
		if !j.RunAt.IsZero() && runs[0].At.Before(j.RunAt) {
			t.Errorf("job %d began at %v, before it was due at %v", p, runs[0].At, j.RunAt)
		}
		completions := 0
		for _, n := range r.Done[id] {
			completions += n
		}
		last := runs[len(runs)-1]
		if _, killed := f.Killed[last.PID]; completions > 1 || completions == 0 && !killed {
			t.Errorf("job %d completed %d times (by pid %v), last run %+v", p, completions, r.Done[id], last)
		}
		if last.Attempt != rescues[id]+1 {
			t.Errorf("job %d: claimed %d times, rescued %d times; runs %+v", p, last.Attempt, rescues[id], runs)
		}
		for _, run := range runs {
			if run.ID != id {
				t.Errorf("job %d ran under IDs %d and %d", p, id, run.ID)
			}
		}
		for a := 1; a < last.Attempt; a++ {
			l, ok := f.Leases[Ref{id, a}]
			if !ok {
				t.Errorf("job %d was claimed again after attempt %d, which was not in flight at a kill: runs %+v", p, a, runs)
				continue
			}
			i := slices.IndexFunc(runs, func(run Run) bool { return run.Attempt == a+1 })
			if i >= 0 && runs[i].At.Before(l.Expiry) {
				t.Errorf("job %d ran again at %v, before its lease of attempt %d expired at %v", p, runs[i].At, a, l.Expiry)
			}
		}
	}
}
