package redisstore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/queuekit/queue"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// The fleet tests run a queue in this process and another in a helper
// process (TestFleetHelper, this test binary re-run), both on one prefix,
// and check that target health and cadence set in one hold in the other.
// The helper takes commands on stdin, "<id> <command> <args>", and
// answers "R <id> <answer>" on stdout.

const fleetEnv = "REDISSTORE_FLEET"

// fleetOpts are the queue options of both processes: a breaker that one
// failure opens for an hour.
func fleetOpts() []queue.Option {
	return []queue.Option{queue.WithName("fleet"), queue.WithWorkers(1, 1), queue.WithLogger(quietLogger()),
		queue.WithCircuitBreaker(1, time.Hour, 1)}
}

// errFleet is what every job of the fleet tests fails with.
var errFleet = errors.New("downstream failed")

func failing(context.Context, queue.Job[int]) error { return errFleet }

// TestFleetHelper is the helper process of the fleet tests; it does
// nothing in a normal test run.
func TestFleetHelper(t *testing.T) {
	if os.Getenv(fleetEnv) == "" {
		t.Skip("helper process of the fleet tests")
	}
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer c.Close()
	s, err := New[int](c, WithPrefix(os.Getenv(fleetEnv)), WithWorkerID("helper"))
	if err != nil {
		t.Fatal(err)
	}
	q, err := queue.NewWithStore(s, failing, fleetOpts()...)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Start(ctx); err != nil {
		t.Fatal(err)
	}
	fmt.Println("READY")
	fleetCommands(q, os.Stdin, os.Stdout)
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	_ = q.Shutdown(sctx)
}

// fleetCommands answers the parent's commands until stdin ends.
func fleetCommands(q *queue.Queue[int], in io.Reader, out io.Writer) {
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), " ", 4)
		for len(f) < 4 {
			f = append(f, "")
		}
		id, cmd, a, b := f[0], f[1], f[2], f[3]
		ans := "ok"
		switch cmd {
		case "suspend":
			_ = q.Suspend(a, time.Hour)
		case "disable":
			_ = q.Disable(a, errors.New(b))
		case "nextdue":
			q.SetNextDue(a, b, time.Now().Add(time.Hour))
		case "due":
			ans = fmt.Sprint(q.Due(a, b))
		case "fanout":
			got := q.Fanout(a, strings.Split(b, ","))
			slices.Sort(got)
			ans = strings.Join(got, ",")
		case "status":
			ans = fleetStatus(q, a)
		default:
			ans = "unknown command " + cmd
		}
		fmt.Fprintf(out, "R %s %s\n", id, ans)
	}
}

// fleetStatus describes target's health in one line.
func fleetStatus(q *queue.Queue[int], target string) string {
	st, ok := q.Target(target)
	if !ok {
		return "unknown"
	}
	return fmt.Sprintf("disabled=%v reason=%q suspended=%v breaker=%s", st.Disabled, st.Reason, !st.SuspendedUntil.IsZero(), st.Breaker)
}

// fleetProc is a running helper process.
type fleetProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	done  chan struct{}
	n     int
}

func startFleetProc(t *testing.T, prefix string) *fleetProc {
	t.Helper()
	return startHelperProc(t, "TestFleetHelper", fleetEnv+"="+prefix)
}

// startHelperProc runs the test named helper in a process of its own,
// with env added to its environment, and waits for it to print READY.
func startHelperProc(t *testing.T, helper string, env ...string) *fleetProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+helper+"$", "-test.count=1")
	cmd.Env = append(append(os.Environ(), env...), "QUEUE_REDIS_ADDR="+redisAddr())
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	p := &fleetProc{cmd: cmd, stdin: stdin, lines: make(chan string, 64), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		_ = cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
	})
	p.expect(t, func(l string) bool { return l == "READY" }, "the helper to start")
	return p
}

func (p *fleetProc) expect(t *testing.T, match func(string) bool, what string) string {
	t.Helper()
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	for {
		select {
		case l := <-p.lines:
			if match(l) {
				return l
			}
		case <-p.done:
			t.Fatalf("the helper exited waiting for %s", what)
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// ask sends a command and returns the helper's answer.
func (p *fleetProc) ask(t *testing.T, cmd string) string {
	t.Helper()
	p.n++
	_, err := fmt.Fprintf(p.stdin, "%d %s\n", p.n, cmd)
	require.NoError(t, err)
	prefix := fmt.Sprintf("R %d ", p.n)
	l := p.expect(t, func(l string) bool { return strings.HasPrefix(l, prefix) }, cmd)
	return strings.TrimPrefix(l, prefix)
}

// await asks until the answer is want: the helper's view follows the
// store's pub/sub messages, in another process, so it is polled.
func (p *fleetProc) await(t *testing.T, cmd, want string) {
	t.Helper()
	tick := time.NewTicker(pollTick)
	defer tick.Stop()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := p.ask(t, cmd)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: got %q, want %q", cmd, got, want)
		}
		<-tick.C
	}
}

// stop closes the helper's stdin, which stops its queue, and waits.
func (p *fleetProc) stop(t *testing.T) {
	t.Helper()
	p.stdin.Close()
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the helper did not stop")
	}
}

// fleetQueue starts this process's queue on prefix.
func fleetQueue(t *testing.T, c *redis.Client, prefix string) *queue.Queue[int] {
	t.Helper()
	s, err := New[int](c, WithPrefix(prefix), WithWorkerID("parent"))
	require.NoError(t, err)
	q, err := queue.NewWithStore(s, failing, fleetOpts()...)
	require.NoError(t, err)
	require.NoError(t, q.Start(context.Background()))
	t.Cleanup(func() { _ = q.Shutdown(context.Background()) })
	return q
}

// awaitLocal waits for this process's view, fed by the store's pub/sub
// messages, to satisfy cond.
func awaitLocal(t *testing.T, q *queue.Queue[int], target, want string) {
	t.Helper()
	require.Eventually(t, func() bool { return fleetStatus(q, target) == want }, 10*time.Second, pollTick,
		"%s: want %s, have %s", target, want, fleetStatus(q, target))
}

// TestFleetTargetHealth: suspension, disabling with its reason, the
// breaker and the fan-out cadence set in one process hold in the other;
// and a disabled target stays disabled after both restart.
func TestFleetTargetHealth(t *testing.T) {
	c := needRedis(t)
	prefix := testPrefix(t, c)
	b := startFleetProc(t, prefix)
	a := fleetQueue(t, c, prefix)

	// Suspended here, skipped there.
	require.NoError(t, a.Suspend("s", time.Hour))
	b.await(t, "status s", `disabled=false reason="" suspended=true breaker=closed`)
	require.Equal(t, "x", b.ask(t, "fanout k s,x"))

	// Disabled there, with its reason, disabled here.
	require.Equal(t, "ok", b.ask(t, "disable d 404 Not Found"))
	awaitLocal(t, a, "d", `disabled=true reason="404 Not Found" suspended=false breaker=closed`)
	require.Equal(t, []string{"x"}, a.Fanout("k", []string{"d", "x"}))

	// Cadence: next due in an hour here, not due there.
	require.Equal(t, "true", b.ask(t, "due c k"))
	a.SetNextDue("c", "k", time.Now().Add(time.Hour))
	b.await(t, "due c k", "false")
	require.Equal(t, "true", b.ask(t, "due c other"))

	// The breaker: a failure, in whichever process runs the job, opens
	// it for both.
	require.NoError(t, a.Enqueue(context.Background(), queue.Job[int]{Target: "brk"}))
	b.await(t, "status brk", `disabled=false reason="" suspended=false breaker=open`)
	awaitLocal(t, a, "brk", `disabled=false reason="" suspended=false breaker=open`)
	require.Equal(t, "x", b.ask(t, "fanout k brk,x"))

	// Both restart: the disabled target is still disabled, at once.
	b.stop(t)
	require.NoError(t, a.Stop(context.Background()))
	b2 := startFleetProc(t, prefix)
	require.Equal(t, `disabled=true reason="404 Not Found" suspended=false breaker=closed`, b2.ask(t, "status d"))
	require.Equal(t, "false", b2.ask(t, "due c k"))
	a2 := fleetQueue(t, c, prefix)
	require.Equal(t, `disabled=true reason="404 Not Found" suspended=false breaker=closed`, fleetStatus(a2, "d"))
	require.Equal(t, `disabled=false reason="" suspended=true breaker=closed`, fleetStatus(a2, "s"))
	require.Equal(t, `disabled=false reason="" suspended=false breaker=open`, fleetStatus(a2, "brk"))

	// A Resume in one process clears the target in the other.
	require.NoError(t, a2.Resume("d"))
	b2.await(t, "status d", `disabled=false reason="" suspended=false breaker=closed`)
	b2.stop(t)
}
