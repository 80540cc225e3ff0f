package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
)

// TestOtelStdout: with -otel stdout a request, the job it enqueues and
// the job's run are written as JSON lines of one trace.
func TestOtelStdout(t *testing.T) {
	var out bytes.Buffer
	tr, err := newTracing("stdout", &out)
	require.NoError(t, err)
	ran := make(chan struct{})
	q, err := queue.New(func(context.Context, queue.Job[int]) error { close(ran); return nil },
		append(tr.opts, queue.WithName("forwarder"))...)
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, q.Start(ctx))
	h := tr.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		require.NoError(t, q.Enqueue(r.Context(), queue.Job[int]{Payload: 1}))
	}))
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/announce", nil))
	<-ran
	require.NoError(t, q.Stop(ctx))
	require.NoError(t, tr.shutdown(ctx)) // flushes the batch

	traces := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var s struct {
			Name        string
			SpanContext struct{ TraceID string }
		}
		require.NoError(t, json.Unmarshal([]byte(line), &s), line)
		traces[s.SpanContext.TraceID] = append(traces[s.SpanContext.TraceID], s.Name)
	}
	require.Len(t, traces, 1, "one trace")
	for _, names := range traces {
		assert.ElementsMatch(t, []string{"GET /announce", "create forwarder", "process forwarder"}, names)
	}
}

func TestOtelArg(t *testing.T) {
	_, s, err := parseArgs([]string{"-upstream", "x", "-otel", "stdout"}, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, "stdout", s.otel)
	_, _, err = parseArgs([]string{"-upstream", "x", "-otel", "jaeger"}, &bytes.Buffer{})
	require.ErrorContains(t, err, `-otel "jaeger"`)
}
