package fleettest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/queuekit/queue"
)

// The helper-process protocol of the multi-process tests. A helper is the
// store's test binary re-run on one test (StartHelper), which prints
// READY once its queue runs, then takes commands on stdin,
// "<n> <command> <args>", and answers each with "R <n> <answer>" on
// stdout (Commands); closing its stdin stops it.

// Proc is a running helper process.
type Proc struct {
	Owner string // its worker ID: set by StartProc, empty otherwise
	PID   int    // its process ID

	what  string // "helper" or "manager", in the failure messages
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	done  chan struct{}
	n     int
}

// StartHelper runs the test named helper of this test binary in a process
// of its own, with env added to its environment, and waits for it to
// print READY. The process is killed when t ends.
func StartHelper(t *testing.T, helper string, env ...string) *Proc {
	t.Helper()
	return start(t, "^"+helper+"$", "helper", env)
}

// StartProc re-runs this test binary with -test.run=run and env added,
// waits for it to print READY, and asks who it is (a manager of Serve).
// The process is killed when t ends.
func StartProc(t *testing.T, run string, env ...string) *Proc {
	t.Helper()
	p := start(t, run, "manager", env)
	who := strings.Fields(p.Ask(t, "who"))
	if len(who) != 2 {
		t.Fatalf("who: %q", who)
	}
	p.Owner = who[0]
	var err error
	if p.PID, err = strconv.Atoi(who[1]); err != nil {
		t.Fatal(err)
	}
	return p
}

func start(t *testing.T, run, what string, env []string) *Proc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run="+run, "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &Proc{PID: cmd.Process.Pid, what: what, cmd: cmd, stdin: stdin, lines: make(chan string, 64), done: make(chan struct{})}
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
	p.Expect(t, func(l string) bool { return l == "READY" }, "the "+what+" to start")
	return p
}

// Expect reads the process's output until a line matches, and returns
// it; it fails t if the process exits first or no line matches within 30
// seconds. what names the line awaited.
func (p *Proc) Expect(t *testing.T, match func(string) bool, what string) string {
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
			t.Fatalf("the %s exited waiting for %s", p.what, what)
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// Ask sends a command and returns the process's answer.
func (p *Proc) Ask(t *testing.T, cmd string) string {
	t.Helper()
	p.n++
	if _, err := fmt.Fprintf(p.stdin, "%d %s\n", p.n, cmd); err != nil {
		t.Fatal(err)
	}
	prefix := fmt.Sprintf("R %d ", p.n)
	l := p.Expect(t, func(l string) bool { return strings.HasPrefix(l, prefix) }, cmd)
	return strings.TrimPrefix(l, prefix)
}

// Await asks cmd every tick until the answer is want, and fails t if it
// is not within 10 seconds: the process's view follows the store's
// server, from another process, so it is polled.
func (p *Proc) Await(t *testing.T, cmd, want string, tick time.Duration) {
	t.Helper()
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := p.Ask(t, cmd)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: got %q, want %q", cmd, got, want)
		}
		<-ticker.C
	}
}

// Stop closes the process's stdin, which stops its queue, and waits for
// it to exit (at most 30 seconds). It returns the exit code.
func (p *Proc) Stop(t *testing.T) int {
	t.Helper()
	p.stdin.Close()
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("the %s did not stop", p.what)
	}
	return p.cmd.ProcessState.ExitCode()
}

// Kill SIGKILLs the process and waits for it to exit. It returns the time
// of the kill.
func (p *Proc) Kill(t *testing.T) time.Time {
	t.Helper()
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	<-p.done
	return killed
}

// Commands is the helper's side of the protocol: it reads the commands on
// in until it ends, and writes answer's answer to each on out. answer is
// given the command's name and the rest of its line.
func Commands(in io.Reader, out io.Writer, answer func(cmd, args string) string) {
	sc := bufio.NewScanner(in)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), " ", 3)
		for len(f) < 3 {
			f = append(f, "")
		}
		fmt.Fprintf(out, "R %s %s\n", f[0], answer(f[1], f[2]))
	}
}

// RunHelper is the body of a helper process around q: it starts q,
// prints READY, answers the commands on stdin with answer until stdin
// ends (Commands; a nil answer only waits for the end), and shuts q down
// within 20 seconds, returning Shutdown's error.
func RunHelper(t *testing.T, q *queue.Queue[int], answer func(cmd, args string) string) error {
	ctx := context.Background()
	if err := q.Start(ctx); err != nil {
		t.Fatal(err)
	}
	fmt.Println("READY")
	if answer != nil {
		Commands(os.Stdin, os.Stdout, answer)
	} else {
		_, _ = io.Copy(io.Discard, os.Stdin)
	}
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	return q.Shutdown(sctx)
}
