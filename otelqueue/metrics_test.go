package otelqueue_test

import (
	"context"
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/otelqueue"
)

// TestMetrics runs a job that succeeds and one that is dead-lettered and
// reads the instruments back; their names are the Prometheus collectors'
// (with "_total" on counters).
func TestMetrics(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	otq := otelqueue.New(otelqueue.WithTracerProvider(noop.NewTracerProvider()), otelqueue.WithMeterProvider(mp))
	reg := prometheus.NewRegistry()
	q, err := queue.New(func(ctx context.Context, job queue.Job[int]) error {
		if job.Payload == 2 {
			return queue.Permanent(errors.New("no"))
		}
		return nil
	}, append(otq.Options(), queue.WithName("m"), queue.WithMetrics(reg, 1))...)
	require.NoError(t, err)
	reg1, err := otq.ObserveQueue(q)
	require.NoError(t, err)
	defer reg1.Unregister()
	ctx := context.Background()
	require.NoError(t, q.Start(ctx))
	require.NoError(t, q.Enqueue(ctx, queue.Job[int]{Payload: 1}))
	require.NoError(t, q.Enqueue(ctx, queue.Job[int]{Payload: 2}))
	// The Prometheus collectors' names, read before Stop unregisters them.
	families, err := reg.Gather()
	require.NoError(t, err)
	prom := map[string]bool{}
	for _, f := range families {
		prom[f.GetName()] = true
	}
	require.NoError(t, q.Stop(ctx))

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	require.Len(t, rm.ScopeMetrics, 1)
	got := map[string]metricdata.Aggregation{}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		got[m.Name] = m.Data
	}

	sums := func(name string) map[string]int64 {
		out := map[string]int64{}
		switch d := got[name].(type) {
		case metricdata.Sum[int64]:
			for _, p := range d.DataPoints {
				out[label(p.Attributes)] = p.Value
			}
		case metricdata.Gauge[int64]:
			for _, p := range d.DataPoints {
				out[label(p.Attributes)] = p.Value
			}
		default:
			t.Fatalf("%s: %T", name, got[name])
		}
		return out
	}
	assert.Equal(t, map[string]int64{"queue=m": 2}, sums("queue_jobs_enqueued"))
	assert.Equal(t, map[string]int64{"outcome=done,queue=m": 1, "outcome=dead,queue=m": 1, "outcome=cancelled,queue=m": 0}, sums("queue_jobs_finished"))
	assert.Equal(t, map[string]int64{"queue=m": 1}, sums("queue_job_failures"))
	assert.Equal(t, map[string]int64{"queue=m": 0}, sums("queue_depth"))

	h, ok := got["queue_job_run_seconds"].(metricdata.Histogram[float64])
	require.True(t, ok, "queue_job_run_seconds: %T", got["queue_job_run_seconds"])
	counts := map[string]uint64{}
	for _, p := range h.DataPoints {
		counts[label(p.Attributes)] = p.Count
	}
	assert.Equal(t, map[string]uint64{"outcome=done,queue=m": 1, "outcome=dead,queue=m": 1}, counts)

	// The same names as the Prometheus collectors'.
	for name, data := range got {
		if s, ok := data.(metricdata.Sum[int64]); ok && s.IsMonotonic {
			name += "_total"
		}
		assert.True(t, prom[name], "%s is not a Prometheus collector's name", name)
	}
}

func label(s attribute.Set) string {
	out := ""
	for _, kv := range s.ToSlice() {
		if out != "" {
			out += ","
		}
		out += string(kv.Key) + "=" + kv.Value.String()
	}
	return out
}

func TestObserveQueueWithoutMeterProvider(t *testing.T) {
	q, err := queue.New(func(context.Context, queue.Job[int]) error { return nil })
	require.NoError(t, err)
	_, err = otelqueue.New().ObserveQueue(q)
	assert.ErrorIs(t, err, otelqueue.ErrNoMeterProvider)
}
