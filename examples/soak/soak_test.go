package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// TestSoak runs the soak for 5 s, or for 60 s when QUEUE_SOAK is set or
// CI=true (QUEUE_SOAK may also be a duration, e.g. QUEUE_SOAK=10m). It fails
// if a job is lost or runs twice at once, or if memory or goroutines grow.
func TestSoak(t *testing.T) {
	cfg := defaultConfig()
	cfg.duration = 5 * time.Second
	if v := os.Getenv("QUEUE_SOAK"); v != "" || os.Getenv("CI") == "true" {
		cfg.duration = time.Minute
		if d, err := time.ParseDuration(v); err == nil && d > 0 {
			cfg.duration = d
		}
	}
	cfg.every = max(cfg.duration/6, time.Second)
	var out logWriter
	out.t = t
	samples, err := run(context.Background(), cfg, &out)
	if err != nil {
		t.Fatal(err)
	}
	if len(samples) < 10 {
		t.Fatalf("only %d samples in %s", len(samples), cfg.duration)
	}
	if last := samples[len(samples)-1].st; last.Done == 0 || last.Cancelled == 0 {
		t.Fatalf("the workload did not exercise the queue: %+v", last.Counts)
	}
}

// logWriter sends the soak's report lines to the test log.
type logWriter struct{ t *testing.T }

func (w *logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
