package otelqueue_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/otelqueue"
)

// recorder is an SDK tracer provider whose ended spans land, at once,
// in an in-memory exporter; ended is signalled after each one lands.
type recorder struct {
	tp    *sdktrace.TracerProvider
	exp   *tracetest.InMemoryExporter
	ended chan struct{}
}

func newRecorder(t *testing.T) *recorder {
	exp := tracetest.NewInMemoryExporter()
	r := &recorder{exp: exp, ended: make(chan struct{}, 1)}
	// The syncer exports a span before the next processor hears of its
	// end, so a signal always follows the span's landing.
	r.tp = sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSpanProcessor(endSignal{r.ended}))
	t.Cleanup(func() { _ = r.tp.Shutdown(context.Background()) })
	return r
}

// endSignal is a span processor that signals ended, without blocking,
// whenever a span ends.
type endSignal struct{ ended chan struct{} }

func (e endSignal) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (e endSignal) OnEnd(sdktrace.ReadOnlySpan) {
	select {
	case e.ended <- struct{}{}:
	default:
	}
}
func (e endSignal) Shutdown(context.Context) error   { return nil }
func (e endSignal) ForceFlush(context.Context) error { return nil }

// named returns the ended spans called name, in the order they ended.
func (r *recorder) named(name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range r.exp.GetSpans() {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// await waits until the recorder holds n spans called name.
func (r *recorder) await(t *testing.T, name string, n int) []tracetest.SpanStub {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		if s := r.named(name); len(s) >= n {
			return s
		}
		select {
		case <-r.ended: // the spans end on other goroutines
		case <-timeout:
			t.Fatalf("%d spans %q after 10s, want %d; have %v", len(r.named(name)), name, n, spanNames(r.exp.GetSpans()))
		}
	}
}

func spanNames(spans []tracetest.SpanStub) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name)
	}
	return out
}

func attrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

func eventNames(s tracetest.SpanStub) []string {
	var out []string
	for _, e := range s.Events {
		out = append(out, e.Name)
	}
	return out
}

// logBuffer is a slog handler's output, safe to read while jobs log.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// lines returns the JSON log lines as maps.
func (l *logBuffer) lines(t *testing.T) []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.b.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m), line)
		out = append(out, m)
	}
	return out
}

var w3c = propagation.TraceContext{}

// TestHTTPRequestToRuns follows one trace from a client through an HTTP
// server that enqueues a job to the job's runs: the first fails, the
// second succeeds, and both are children of the job's create span
// (WithParent), whose parent is the server's span.
func TestHTTPRequestToRuns(t *testing.T) {
	rec := newRecorder(t)
	tracer := rec.tp.Tracer("test")
	var logs logBuffer
	otq := otelqueue.New(otelqueue.WithTracerProvider(rec.tp), otelqueue.WithPropagator(w3c), otelqueue.WithParent(true))

	var attempts sync.Map
	finished := make(chan struct{})
	handler := func(ctx context.Context, job queue.Job[string]) error {
		queue.Logger(ctx).Info("sending", "to", job.Payload)
		if job.Attempt == 1 {
			return errors.New("smtp: 421 try again later")
		}
		attempts.Store(job.Attempt, trace.SpanContextFromContext(ctx))
		close(finished)
		return nil
	}
	q, err := queue.New(handler, append(otq.Options(), queue.WithName("mail"),
		queue.WithRetry(3, time.Millisecond, time.Millisecond),
		queue.WithLogger(slog.New(slog.NewJSONHandler(&logs, nil))))...)
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, q.Start(ctx))
	defer q.Stop(ctx)

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := w3c.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := tracer.Start(ctx, "POST /signup", trace.WithSpanKind(trace.SpanKindServer))
		defer span.End()
		if err := q.Enqueue(ctx, queue.Job[string]{Key: "welcome:ann", Target: "smtp", Payload: "ann@example.com"}); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusAccepted)
	}))
	defer srv.Close()

	cctx, client := tracer.Start(ctx, "signup client", trace.WithSpanKind(trace.SpanKindClient))
	req, err := http.NewRequestWithContext(cctx, http.MethodPost, srv.URL, nil)
	require.NoError(t, err)
	w3c.Inject(cctx, propagation.HeaderCarrier(req.Header))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	client.End()

	select {
	case <-finished:
	case <-time.After(10 * time.Second):
		t.Fatal("the job did not finish")
	}
	runs := rec.await(t, "process mail", 2)
	traceID := client.SpanContext().TraceID()
	server := rec.named("POST /signup")[0]
	create := rec.named("create mail")[0]
	assert.Equal(t, traceID, server.SpanContext.TraceID())
	assert.Equal(t, client.SpanContext().SpanID(), server.Parent.SpanID())
	assert.Equal(t, traceID, create.SpanContext.TraceID())
	assert.Equal(t, server.SpanContext.SpanID(), create.Parent.SpanID())
	assert.Equal(t, trace.SpanKindProducer, create.SpanKind)
	ca := attrs(create)
	assert.Equal(t, "queuekit", ca["messaging.system"].AsString())
	assert.Equal(t, "create", ca["messaging.operation.name"].AsString())
	assert.Equal(t, "mail", ca["messaging.destination.name"].AsString())

	for i, run := range runs {
		attempt := i + 1
		a := attrs(run)
		assert.Equal(t, traceID, run.SpanContext.TraceID(), "run %d in the request's trace", attempt)
		assert.Equal(t, create.SpanContext.SpanID(), run.Parent.SpanID(), "run %d a child of the create span", attempt)
		assert.True(t, run.Parent.IsRemote())
		assert.Empty(t, run.Links)
		assert.Equal(t, trace.SpanKindConsumer, run.SpanKind)
		assert.Equal(t, "queuekit", a["messaging.system"].AsString())
		assert.Equal(t, "process", a["messaging.operation.name"].AsString())
		assert.Equal(t, "process", a["messaging.operation.type"].AsString())
		assert.Equal(t, "mail", a["messaging.destination.name"].AsString())
		assert.NotEqual(t, "0", a["messaging.message.id"].AsString())
		assert.Equal(t, int64(attempt), a[otelqueue.AttrAttempt].AsInt64())
		assert.Equal(t, int64(3), a[otelqueue.AttrMaxAttempts].AsInt64())
		assert.Equal(t, "welcome:ann", a[otelqueue.AttrKey].AsString())
		assert.Equal(t, "smtp", a[otelqueue.AttrTarget].AsString())
	}
	assert.Equal(t, attrs(runs[0])["messaging.message.id"], attrs(runs[1])["messaging.message.id"], "one job")

	first, second := runs[0], runs[1]
	assert.Equal(t, "retried", attrs(first)[otelqueue.AttrOutcome].AsString())
	assert.Equal(t, codes.Error, first.Status.Code)
	assert.Equal(t, "smtp: 421 try again later", first.Status.Description)
	assert.Equal(t, []string{"queuekit.job.retried", "exception"}, eventNames(first))
	assert.Equal(t, "done", attrs(second)[otelqueue.AttrOutcome].AsString())
	assert.Equal(t, codes.Unset, second.Status.Code)
	assert.Equal(t, []string{"queuekit.job.done"}, eventNames(second))

	// The handler's ctx holds the run's span, and its log lines the IDs.
	sc, _ := attempts.Load(2)
	assert.Equal(t, second.SpanContext.SpanID(), sc.(trace.SpanContext).SpanID())
	var sending []map[string]any
	for _, l := range logs.lines(t) {
		if l["msg"] == "sending" {
			sending = append(sending, l)
		}
	}
	require.Len(t, sending, 2)
	for i, l := range sending {
		assert.Equal(t, traceID.String(), l["trace_id"], "log line %d", i)
		assert.Equal(t, runs[i].SpanContext.SpanID().String(), l["span_id"], "log line %d", i)
		assert.Equal(t, "welcome:ann", l["key"], "log line %d", i)
	}
}

// TestLinkedByDefault: without WithParent each run is the root of a trace
// of its own, linked to the job's create span.
func TestLinkedByDefault(t *testing.T) {
	rec := newRecorder(t)
	otq := otelqueue.New(otelqueue.WithTracerProvider(rec.tp), otelqueue.WithPropagator(w3c))
	done := make(chan struct{})
	q, err := queue.New(func(ctx context.Context, job queue.Job[int]) error {
		close(done)
		return nil
	}, append(otq.Options(), queue.WithName("links"))...)
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, q.Start(ctx))
	defer q.Stop(ctx)

	pctx, parent := rec.tp.Tracer("test").Start(ctx, "request")
	require.NoError(t, q.Enqueue(pctx, queue.Job[int]{Payload: 1}))
	parent.End()
	<-done
	run := rec.await(t, "process links", 1)[0]
	create := rec.named("create links")[0]
	assert.Equal(t, parent.SpanContext().TraceID(), create.SpanContext.TraceID())
	assert.False(t, run.Parent.IsValid(), "a root span")
	assert.NotEqual(t, create.SpanContext.TraceID(), run.SpanContext.TraceID())
	require.Len(t, run.Links, 1)
	assert.Equal(t, create.SpanContext.SpanID(), run.Links[0].SpanContext.SpanID())
	assert.Equal(t, create.SpanContext.TraceID(), run.Links[0].SpanContext.TraceID())
}

// TestPanicAndDead: a panicking handler's run is dead (one attempt) with
// status Error, error.type panic and the stack in the exception event; a
// Permanent error's too, without a stack.
func TestPanicAndDead(t *testing.T) {
	rec := newRecorder(t)
	otq := otelqueue.New(otelqueue.WithTracerProvider(rec.tp), otelqueue.WithPropagator(w3c))
	q, err := queue.New(func(ctx context.Context, job queue.Job[string]) error {
		if job.Payload == "panic" {
			panic("boom")
		}
		return queue.Permanent(errors.New("refused"))
	}, append(otq.Options(), queue.WithName("bad"), queue.WithRetry(1, 0, 0))...)
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, q.Start(ctx))
	defer q.Stop(ctx)
	require.NoError(t, q.Enqueue(ctx, queue.Job[string]{Key: "p", Payload: "panic"}))
	require.NoError(t, q.Enqueue(ctx, queue.Job[string]{Key: "e", Payload: "error"}))
	runs := rec.await(t, "process bad", 2)
	for _, run := range runs {
		a := attrs(run)
		assert.Equal(t, "dead", a[otelqueue.AttrOutcome].AsString())
		assert.Equal(t, codes.Error, run.Status.Code)
		require.Len(t, run.Events, 2)
		assert.Equal(t, "queuekit.job.dead", run.Events[0].Name)
		exc := run.Events[1]
		assert.Equal(t, "exception", exc.Name)
		ea := map[attribute.Key]attribute.Value{}
		for _, kv := range exc.Attributes {
			ea[kv.Key] = kv.Value
		}
		switch a[otelqueue.AttrKey].AsString() {
		case "p":
			assert.Equal(t, "panic", a["error.type"].AsString())
			assert.Contains(t, ea["exception.message"].AsString(), "boom")
			assert.Contains(t, ea["exception.stacktrace"].AsString(), "goroutine")
		case "e":
			assert.NotContains(t, a, attribute.Key("error.type"))
			assert.Contains(t, ea["exception.message"].AsString(), "refused")
			assert.NotContains(t, ea, attribute.Key("exception.stacktrace"))
		default:
			t.Errorf("unexpected run %v", a)
		}
	}
}

// TestNoopProvider: with a no-op tracer provider no span is started, and
// a context the caller holds still reaches the handler and its logs.
func TestNoopProvider(t *testing.T) {
	otq := otelqueue.New(otelqueue.WithTracerProvider(noop.NewTracerProvider()), otelqueue.WithPropagator(w3c))
	var logs logBuffer
	got := make(chan trace.SpanContext, 2)
	metas := make(chan queue.Meta, 2)
	q, err := queue.New(func(ctx context.Context, job queue.Job[int]) error {
		queue.Logger(ctx).Info("ran")
		metas <- job.Meta
		got <- trace.SpanContextFromContext(ctx)
		return nil
	}, append(otq.Options(), queue.WithName("noop"), queue.WithLogger(slog.New(slog.NewJSONHandler(&logs, nil))))...)
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, q.Start(ctx))
	defer q.Stop(ctx)

	remote := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled})
	require.NoError(t, q.Enqueue(trace.ContextWithSpanContext(ctx, remote), queue.Job[int]{Payload: 1}))
	sc := <-got
	assert.Equal(t, remote.TraceID(), sc.TraceID())
	assert.Equal(t, remote.SpanID(), sc.SpanID())
	assert.Equal(t, "00-01020300000000000000000000000000-0405060000000000-01", (<-metas).Get("traceparent"))

	require.NoError(t, q.Enqueue(ctx, queue.Job[int]{Payload: 2}))
	assert.False(t, (<-got).IsValid())
	assert.True(t, (<-metas).IsZero(), "nothing to carry")

	lines := logs.lines(t)
	var ran []map[string]any
	for _, l := range lines {
		if l["msg"] == "ran" {
			ran = append(ran, l)
		}
	}
	require.Len(t, ran, 2)
	assert.Equal(t, remote.TraceID().String(), ran[0]["trace_id"])
	assert.NotContains(t, ran[1], "trace_id")
}

// TestDefaultPropagator: with the global propagator never set (it
// propagates nothing), New uses W3C trace context.
func TestDefaultPropagator(t *testing.T) {
	rec := newRecorder(t)
	otq := otelqueue.New(otelqueue.WithTracerProvider(rec.tp))
	ctx, span := rec.tp.Tracer("test").Start(context.Background(), "request")
	defer span.End()
	job := &queue.JobInfo{Queue: "q"}
	require.NoError(t, otq.EnqueueHook(ctx, job))
	create := rec.named("create q")
	require.Len(t, create, 1)
	assert.Equal(t, "00-"+span.SpanContext().TraceID().String()+"-"+create[0].SpanContext.SpanID().String()+"-01", job.Meta.Get("traceparent"))
}
