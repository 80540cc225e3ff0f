package fleettest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/storekit"
)

// The target-health fleet test (TargetHealth) runs a queue in the test's
// process and another in a helper process (ServeHealth, the store's test
// binary re-run), both on one store, and checks that target health and
// cadence set in one hold in the other. The helper's commands are
// suspend, disable, nextdue, due, fanout and status (Status).

// ErrHealth is what every job of the target-health test fails with.
var ErrHealth = errors.New("downstream failed")

// Failing is the handler of the target-health test: every job fails with
// ErrHealth.
func Failing(context.Context, queue.Job[int]) error { return ErrHealth }

// HealthOptions are the queue options of both processes of the
// target-health test: a breaker that one failure opens for an hour.
func HealthOptions() []queue.Option {
	return []queue.Option{queue.WithName("fleet"), queue.WithWorkers(1, 1),
		queue.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))), queue.WithCircuitBreaker(1, time.Hour, 1)}
}

// SlotOptions are the queue options of the processes of the fleet
// concurrency tests (TestFleetConcurrency...): workers workers, and a
// limit of limit running jobs per target across the fleet.
func SlotOptions(workers, limit int) []queue.Option {
	return []queue.Option{queue.WithName("slots"), queue.WithWorkers(workers, workers),
		queue.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))), queue.WithTargetConcurrency(limit)}
}

// ServeHealth is the body of the target-health test's helper process: it
// runs a queue on s (Failing, HealthOptions), prints READY, answers the
// commands on stdin until it ends, and shuts the queue down.
func ServeHealth(t *testing.T, s storekit.Store[int]) {
	q, err := queue.NewWithStore(s, Failing, HealthOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	_ = RunHelper(t, q, func(cmd, args string) string {
		a, b, _ := strings.Cut(args, " ")
		switch cmd {
		case "suspend":
			_ = q.Suspend(a, time.Hour)
		case "disable":
			_ = q.Disable(a, errors.New(b))
		case "nextdue":
			q.SetNextDue(a, b, time.Now().Add(time.Hour))
		case "due":
			return fmt.Sprint(q.Due(a, b))
		case "fanout":
			got := q.Fanout(a, strings.Split(b, ","))
			slices.Sort(got)
			return strings.Join(got, ",")
		case "status":
			return Status(q, a)
		default:
			return "unknown command " + cmd
		}
		return "ok"
	})
}

// Status describes target's health in q in one line.
func Status(q *queue.Queue[int], target string) string {
	st, ok := q.Target(target)
	if !ok {
		return "unknown"
	}
	return fmt.Sprintf("disabled=%v reason=%q suspended=%v breaker=%s", st.Disabled, st.Reason, !st.SuspendedUntil.IsZero(), st.Breaker)
}

// AwaitStatus checks target's Status in q every tick until it is want,
// and fails t if it is not within 10 seconds: q's view follows the
// store's server, fed by other processes, so it is polled.
func AwaitStatus(t *testing.T, q *queue.Queue[int], target, want string, tick time.Duration) {
	t.Helper()
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for Status(q, target) != want {
		select {
		case <-deadline.C:
			if got := Status(q, target); got != want {
				t.Fatalf("%s: want %s, have %s", target, want, got)
			}
			return
		case <-ticker.C:
		}
	}
}

// TargetHealth is the target-health test: suspension, disabling with its
// reason, the breaker and the fan-out cadence set in one process hold in
// the other; and a disabled target stays disabled after both restart.
// start starts a helper process (ServeHealth) on the test's store, local
// starts a queue (Failing, HealthOptions) on it in this process; tick is
// how often a view that follows the store is polled.
func TargetHealth(t *testing.T, start func(t *testing.T) *Proc, local func(t *testing.T) *queue.Queue[int], tick time.Duration) {
	t.Helper()
	ctx := context.Background()
	noErr := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	equal := func(want, got string) {
		t.Helper()
		if got != want {
			t.Fatalf("got %q, want %q", got, want)
		}
	}
	b := start(t)
	a := local(t)

	// Suspended here, skipped there.
	noErr(a.Suspend("s", time.Hour))
	b.Await(t, "status s", `disabled=false reason="" suspended=true breaker=closed`, tick)
	equal("x", b.Ask(t, "fanout k s,x"))

	// Disabled there, with its reason, disabled here.
	equal("ok", b.Ask(t, "disable d 404 Not Found"))
	AwaitStatus(t, a, "d", `disabled=true reason="404 Not Found" suspended=false breaker=closed`, tick)
	equal("x", strings.Join(a.Fanout("k", []string{"d", "x"}), ","))

	// A reason with bytes a store may refuse (PostgreSQL stores neither
	// invalid UTF-8 nor NUL) is escaped (core.SafeText), not left to jam
	// the writes.
	noErr(a.Disable("bin", errors.New("bad \xff byte \x00")))
	b.Await(t, "status bin", `disabled=true reason="bad \\xff byte \\x00" suspended=false breaker=closed`, tick)

	// Cadence: next due in an hour here, not due there.
	equal("true", b.Ask(t, "due c k"))
	a.SetNextDue("c", "k", time.Now().Add(time.Hour))
	b.Await(t, "due c k", "false", tick)
	equal("true", b.Ask(t, "due c other"))

	// The breaker: a failure, in whichever process runs the job, opens
	// it for both.
	noErr(a.Enqueue(ctx, queue.Job[int]{Target: "brk"}))
	b.Await(t, "status brk", `disabled=false reason="" suspended=false breaker=open`, tick)
	AwaitStatus(t, a, "brk", `disabled=false reason="" suspended=false breaker=open`, tick)
	equal("x", b.Ask(t, "fanout k brk,x"))

	// Both restart: the disabled target is still disabled, at once.
	b.Stop(t)
	noErr(a.Stop(ctx))
	b2 := start(t)
	equal(`disabled=true reason="404 Not Found" suspended=false breaker=closed`, b2.Ask(t, "status d"))
	equal("false", b2.Ask(t, "due c k"))
	a2 := local(t)
	equal(`disabled=true reason="404 Not Found" suspended=false breaker=closed`, Status(a2, "d"))
	equal(`disabled=false reason="" suspended=true breaker=closed`, Status(a2, "s"))
	equal(`disabled=false reason="" suspended=false breaker=open`, Status(a2, "brk"))

	// A Resume in one process clears the target in the other.
	noErr(a2.Resume("d"))
	b2.Await(t, "status d", `disabled=false reason="" suspended=false breaker=closed`, tick)
	b2.Stop(t)
}
