package otelqueue_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/otelqueue"
	"github.com/queuekit/queue/pgstore"
	"github.com/queuekit/queue/redisstore"
	"github.com/queuekit/queue/storekit"
)

// The cross-process tests re-run this test binary: a producer process
// serves one traced request that enqueues two jobs on a durable store and
// exits; then a consumer runs them, the first failing once, and is killed
// (SIGKILL) in the middle of the second; a second consumer rescues that
// one once its lease has expired. Every process writes the spans it ends,
// as they end, to a file of its own; the test reads them back and checks
// that they form one trace. TestHelperProcess is the child's side.

const (
	pgDefault    = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	redisDefault = "127.0.0.1:6379"
)

func pgURL() string {
	if u := os.Getenv("QUEUE_PG_URL"); u != "" {
		return u
	}
	return pgDefault
}

func redisAddr() string {
	if a := os.Getenv("QUEUE_REDIS_ADDR"); a != "" {
		return a
	}
	return redisDefault
}

// unreachable skips the test (in CI: fails it) for a server that does not
// answer.
func unreachable(t *testing.T, what string, err error) {
	t.Helper()
	msg := fmt.Sprintf("%s not reachable: %v (the cross-process tests need it; see QUEUE_PG_URL and QUEUE_REDIS_ADDR)", what, err)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

func TestCrossProcessPG(t *testing.T) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgURL())
	if err != nil {
		unreachable(t, "PostgreSQL at "+pgURL(), err)
	}
	defer conn.Close(ctx)
	schema := fmt.Sprintf("otelq_%d", time.Now().UnixNano())
	pool, err := pgxpool.New(ctx, pgURL())
	require.NoError(t, err)
	defer pool.Close()
	require.NoError(t, pgstore.Migrate(ctx, pool, pgstore.WithSchema(schema)))
	t.Cleanup(func() { _, _ = conn.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE") })
	s, err := pgstore.New[string](pool, pgstore.WithSchema(schema))
	require.NoError(t, err)
	if !keepsMeta(t, s) {
		t.Skip("pgstore does not keep Job.Meta yet (issue #36, its pgstore part): a trace cannot cross it")
	}
	crossProcess(t, "pg", schema)
}

func TestCrossProcessRedis(t *testing.T) {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		unreachable(t, "Redis at "+redisAddr(), err)
	}
	prefix := fmt.Sprintf("otelq%d", time.Now().UnixNano())
	t.Cleanup(func() {
		iter := rdb.Scan(context.Background(), 0, "{"+prefix+":*", 100).Iterator()
		for iter.Next(context.Background()) {
			rdb.Del(context.Background(), iter.Val())
		}
	})
	crossProcess(t, "redis", prefix)
}

// keepsMeta reports whether store s keeps a job's metadata: it enqueues
// a job with some, on a queue of its own, and reads it back.
func keepsMeta(t *testing.T, s storekit.Store[string]) bool {
	ctx := context.Background()
	q, err := queue.NewWithStore(s, func(context.Context, queue.Job[string]) error { return nil }, queue.WithName("probe"))
	require.NoError(t, err)
	job := queue.Job[string]{Key: "probe"}
	job.Meta.Set("k", "v")
	require.NoError(t, q.Enqueue(ctx, job))
	info, err := q.Admin().GetKey(ctx, "probe", false)
	require.NoError(t, err)
	return info.Meta.Get("k") == "v"
}

// crossProcess runs the producer and the two consumers on store ("pg" or
// "redis") in namespace ns (a schema or a key prefix), then checks the
// trace their spans make.
func crossProcess(t *testing.T, store, ns string) {
	dir := t.TempDir()
	start := func(role string) *child {
		return startChild(t, role, "OTELQ_STORE="+store, "OTELQ_NS="+ns,
			"OTELQ_SPANS="+filepath.Join(dir, role+".jsonl"))
	}

	producer := start("producer")
	producer.waitExit(t) // the jobs wait in the store; their producer is gone

	a := start("consumer-a")
	a.await(t, "DONE retry")
	a.await(t, "BLOCKED rescue")
	a.kill(t)

	b := start("consumer-b")
	b.await(t, "DONE rescue")
	b.stop(t)

	var spans []span
	for _, role := range []string{"producer", "consumer-a", "consumer-b"} {
		spans = append(spans, readSpans(t, filepath.Join(dir, role+".jsonl"))...)
	}
	dump := dumpTrace(spans)
	t.Logf("the trace:\n%s", dump)
	if f := os.Getenv("OTELQ_DUMP"); f != "" {
		require.NoError(t, os.WriteFile(f+"."+store+".txt", []byte(dump), 0o644))
	}

	byName := func(name string) []span {
		var out []span
		for _, s := range spans {
			if s.Name == name {
				out = append(out, s)
			}
		}
		return out
	}
	req := byName("POST /announce")
	require.Len(t, req, 1)
	traceID := req[0].Trace
	for _, s := range spans {
		assert.Equal(t, traceID, s.Trace, "%s of %s in the request's trace", s.Name, s.Proc)
	}
	creates := byName("create otel")
	require.Len(t, creates, 2)
	createOf := map[string]string{} // job key → create span
	for _, c := range creates {
		assert.Equal(t, "producer", c.Proc)
		assert.Equal(t, req[0].Span, c.Parent)
		createOf[fmt.Sprint(c.Attrs["queuekit.job.key"])] = c.Span
	}
	runs := map[string][]span{}
	for _, r := range byName("process otel") {
		key := fmt.Sprint(r.Attrs["queuekit.job.key"])
		assert.Equal(t, createOf[key], r.Parent, "a run of %s is a child of its create span", key)
		runs[key] = append(runs[key], r)
	}
	retry := runs["retry"]
	require.Len(t, retry, 2, "two runs of the job that failed once")
	assert.Equal(t, []any{1.0, 2.0}, []any{retry[0].Attrs["queuekit.job.attempt"], retry[1].Attrs["queuekit.job.attempt"]})
	assert.Equal(t, "retried", retry[0].Attrs["queuekit.job.outcome"])
	assert.Equal(t, "Error", retry[0].Status)
	assert.Equal(t, "done", retry[1].Attrs["queuekit.job.outcome"])
	for _, r := range retry {
		assert.Equal(t, "consumer-a", r.Proc)
	}

	// The killed run's span never ended, so it was never exported; the
	// span its handler ended before blocking names it as its parent.
	work := byName("rescue work")
	require.Len(t, work, 1)
	assert.Equal(t, "consumer-a", work[0].Proc)
	for _, s := range spans {
		assert.NotEqual(t, work[0].Parent, s.Span, "the killed run's span was exported")
	}
	rescued := runs["rescue"]
	require.Len(t, rescued, 1, "the rescue's run")
	assert.Equal(t, "consumer-b", rescued[0].Proc)
	assert.Equal(t, "done", rescued[0].Attrs["queuekit.job.outcome"])
	assert.Greater(t, rescued[0].Attrs["queuekit.job.attempt"], 1.0, "the rescued run counts the killed one")
}

// span is one ended span as a child process wrote it.
type span struct {
	Proc, Name, Kind     string
	Trace, Span, Parent  string
	Start, End           time.Time
	Attrs                map[string]any
	Events               []spanEvent
	Links                []string
	Status, StatusDetail string
}

type spanEvent struct {
	Name  string
	Attrs map[string]any
}

// fileExporter writes each span to a file as one JSON line when it ends,
// so that a process killed later loses none that ended.
type fileExporter struct {
	mu   sync.Mutex
	f    *os.File
	proc string
}

func (e *fileExporter) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range spans {
		out := span{Proc: e.proc, Name: s.Name(), Kind: s.SpanKind().String(),
			Trace: s.SpanContext().TraceID().String(), Span: s.SpanContext().SpanID().String(),
			Start: s.StartTime(), End: s.EndTime(), Attrs: map[string]any{},
			Status: s.Status().Code.String(), StatusDetail: s.Status().Description}
		if s.Parent().IsValid() {
			out.Parent = s.Parent().SpanID().String()
		}
		for _, kv := range s.Attributes() {
			out.Attrs[string(kv.Key)] = kv.Value.AsInterface()
		}
		for _, ev := range s.Events() {
			se := spanEvent{Name: ev.Name, Attrs: map[string]any{}}
			for _, kv := range ev.Attributes {
				if kv.Key != "exception.stacktrace" {
					se.Attrs[string(kv.Key)] = kv.Value.AsInterface()
				}
			}
			out.Events = append(out.Events, se)
		}
		for _, l := range s.Links() {
			out.Links = append(out.Links, l.SpanContext.SpanID().String())
		}
		b, err := json.Marshal(out)
		if err != nil {
			return err
		}
		if _, err := e.f.Write(append(b, '\n')); err != nil {
			return err
		}
	}
	return nil
}

func (e *fileExporter) Shutdown(context.Context) error { return e.f.Close() }

func readSpans(t *testing.T, name string) []span {
	t.Helper()
	f, err := os.Open(name)
	require.NoError(t, err)
	defer f.Close()
	var out []span
	dec := json.NewDecoder(f)
	for {
		var s span
		if err := dec.Decode(&s); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out = append(out, s)
	}
}

// dumpTrace draws spans as a tree, parents before children, with a span
// that is a parent but was not exported shown as such.
func dumpTrace(spans []span) string {
	known := map[string]bool{}
	kids := map[string][]span{}
	for _, s := range spans {
		known[s.Span] = true
		kids[s.Parent] = append(kids[s.Parent], s)
	}
	for _, k := range kids {
		sort.Slice(k, func(i, j int) bool { return k[i].Start.Before(k[j].Start) })
	}
	var t0 time.Time
	if len(kids[""]) > 0 {
		t0 = kids[""][0].Start
	}
	var b strings.Builder
	var draw func(parent string, depth int)
	draw = func(parent string, depth int) {
		for _, s := range kids[parent] {
			ind := strings.Repeat("  ", depth)
			fmt.Fprintf(&b, "%s%s [%s] span %s in %s, +%v for %v", ind, s.Name, s.Kind, s.Span, s.Proc,
				s.Start.Sub(t0).Round(time.Millisecond), s.End.Sub(s.Start).Round(10*time.Microsecond))
			if s.Status != "Unset" {
				fmt.Fprintf(&b, ", status %s %q", s.Status, s.StatusDetail)
			}
			b.WriteString("\n")
			keys := slices.Sorted(func(yield func(string) bool) {
				for k := range s.Attrs {
					if !yield(k) {
						return
					}
				}
			})
			for _, k := range keys {
				fmt.Fprintf(&b, "%s    %s=%v\n", ind, k, s.Attrs[k])
			}
			for _, ev := range s.Events {
				fmt.Fprintf(&b, "%s    event %s %v\n", ind, ev.Name, ev.Attrs)
			}
			draw(s.Span, depth+1)
		}
	}
	var traces []string
	for _, s := range spans {
		if !slices.Contains(traces, s.Trace) {
			traces = append(traces, s.Trace)
		}
	}
	fmt.Fprintf(&b, "trace %s\n", strings.Join(traces, ", "))
	draw("", 1)
	for parent := range kids {
		if parent != "" && !known[parent] {
			fmt.Fprintf(&b, "  span %s: not exported (its process was killed before it ended); its children:\n", parent)
			draw(parent, 2)
		}
	}
	return b.String()
}

// child is a helper process.
type child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	mu     sync.Mutex
	lines  []string
	seen   chan struct{} // signalled at each new line
	exited chan struct{}
}

func startChild(t *testing.T, role string, env ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.v")
	cmd.Env = append(os.Environ(), append(env, "OTELQ_HELPER="+role, "QUEUE_PG_URL="+pgURL(), "QUEUE_REDIS_ADDR="+redisAddr())...)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = cmd.Stdout
	require.NoError(t, cmd.Start())
	c := &child{cmd: cmd, stdin: stdin, seen: make(chan struct{}, 1), exited: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.mu.Lock()
			c.lines = append(c.lines, sc.Text())
			c.mu.Unlock()
			select {
			case c.seen <- struct{}{}:
			default:
			}
		}
		_ = cmd.Wait()
		close(c.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-c.exited
		if t.Failed() {
			t.Logf("%s's output:\n%s", role, c.output())
		}
	})
	return c
}

func (c *child) output() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.lines, "\n")
}

func (c *child) has(line string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Contains(c.lines, line)
}

// await waits for the child to print line.
func (c *child) await(t *testing.T, line string) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for !c.has(line) {
		select {
		case <-c.seen:
		case <-c.exited:
			if !c.has(line) {
				t.Fatalf("child exited before %q:\n%s", line, c.output())
			}
		case <-deadline:
			t.Fatalf("no %q from the child in 30s:\n%s", line, c.output())
		}
	}
}

func (c *child) waitExit(t *testing.T) {
	t.Helper()
	select {
	case <-c.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("child did not exit")
	}
	if code := c.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("child exited %d:\n%s", code, c.output())
	}
}

func (c *child) kill(t *testing.T) {
	t.Helper()
	require.NoError(t, c.cmd.Process.Signal(syscall.SIGKILL))
	<-c.exited
}

// stop asks the child to stop (by closing its stdin) and waits.
func (c *child) stop(t *testing.T) {
	t.Helper()
	c.stdin.Close()
	c.waitExit(t)
}

// TestHelperProcess is a producer or consumer process of the
// cross-process tests; it does nothing in a normal test run.
func TestHelperProcess(t *testing.T) {
	role := os.Getenv("OTELQ_HELPER")
	if role == "" {
		t.Skip("helper process for the cross-process tests")
	}
	ctx := context.Background()
	f, err := os.OpenFile(os.Getenv("OTELQ_SPANS"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	require.NoError(t, err)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(&fileExporter{f: f, proc: role}))
	defer tp.Shutdown(ctx)
	otq := otelqueue.New(otelqueue.WithTracerProvider(tp), otelqueue.WithPropagator(propagation.TraceContext{}), otelqueue.WithParent(true))

	handler := func(ctx context.Context, job queue.Job[string]) error {
		switch {
		case job.Key == "retry" && job.Attempt == 1:
			return errors.New("upstream: 503 service unavailable")
		case job.Key == "rescue" && role == "consumer-a":
			_, work := tp.Tracer("test").Start(ctx, "rescue work")
			work.End()
			fmt.Println("BLOCKED rescue")
			<-ctx.Done() // until the process is killed
			return ctx.Err()
		}
		return nil
	}
	// DONE is printed once the store has recorded the job done (the
	// queue emits EventDone after Complete returns), so that killing
	// the process after it cannot make the job run again.
	done := func(ev queue.Event) {
		if ev.Kind == queue.EventDone {
			fmt.Println("DONE " + ev.Key)
		}
	}
	var s storekit.Store[string]
	switch os.Getenv("OTELQ_STORE") {
	case "pg":
		pool, err := pgxpool.New(ctx, pgURL())
		require.NoError(t, err)
		defer pool.Close()
		s, err = pgstore.New[string](pool, pgstore.WithSchema(os.Getenv("OTELQ_NS")), pgstore.WithWorkerID(role),
			pgstore.WithLeaseTTL(time.Second), pgstore.WithLeaderTTL(time.Second), pgstore.WithJanitorInterval(100*time.Millisecond))
		require.NoError(t, err)
	case "redis":
		rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
		defer rdb.Close()
		s, err = redisstore.New[string](rdb, redisstore.WithPrefix(os.Getenv("OTELQ_NS")), redisstore.WithWorkerID(role),
			redisstore.WithLeaseTTL(time.Second), redisstore.WithLeaderTTL(time.Second), redisstore.WithJanitorInterval(100*time.Millisecond))
		require.NoError(t, err)
	}
	q, err := queue.NewWithStore(s, handler, append(otq.Options(), queue.WithName("otel"),
		queue.WithRetry(3, 10*time.Millisecond, 10*time.Millisecond), queue.WithWorkers(2, 2), queue.WithObserver(done))...)
	require.NoError(t, err)

	if role == "producer" {
		// The request: its span is the trace's root; the jobs are
		// enqueued in it, and the process ends without running them.
		rctx, req := tp.Tracer("test").Start(ctx, "POST /announce", trace.WithSpanKind(trace.SpanKindServer))
		require.NoError(t, q.Enqueue(rctx, queue.Job[string]{Key: "retry", Payload: "a"}))
		require.NoError(t, q.Enqueue(rctx, queue.Job[string]{Key: "rescue", Payload: "b"}))
		req.End()
		return
	}
	require.NoError(t, q.Start(ctx))
	fmt.Println("READY")
	_, _ = io.Copy(io.Discard, os.Stdin) // until the parent closes stdin (or kills us)
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	require.NoError(t, q.Stop(sctx))
}
