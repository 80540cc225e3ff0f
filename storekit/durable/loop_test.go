package durable

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/queuekit/queue/queuetest"
)

// TestJitter: every wait is in [d/2, d], and the draws cover the range.
func TestJitter(t *testing.T) {
	for _, d := range []time.Duration{time.Millisecond, time.Second, 7*time.Second + 3} {
		lo, hi := d, time.Duration(0)
		for range 10000 {
			w := Jitter(d)
			if w < d/2 || w > d {
				t.Fatalf("Jitter(%v) = %v, outside [%v, %v]", d, w, d/2, d)
			}
			lo, hi = min(lo, w), max(hi, w)
		}
		if lo > d/2+d/20 || hi < d-d/20 {
			t.Errorf("Jitter(%v) drew only [%v, %v] in 10000 draws", d, lo, hi)
		}
	}
}

// TestRescueLoop: the rescue runs every jittered interval, the first one
// too, keeps running after a failure, which it logs, and stops with ctx.
func TestRescueLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const interval = time.Second
		start := time.Now()
		var mu sync.Mutex
		var at []time.Duration
		rescue := func(ctx context.Context) (int, error) {
			mu.Lock()
			defer mu.Unlock()
			at = append(at, time.Since(start))
			if len(at) == 2 {
				return 0, errors.New("connection refused")
			}
			return 1, nil
		}
		var log syncBuffer
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			RescueLoop(ctx, interval, rescue, slog.New(slog.NewTextHandler(&log, nil)), "teststore")
		}()
		queuetest.Advance(20 * interval)
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		if len(at) < 20 || len(at) > 40 {
			t.Fatalf("%d rescues in 20 intervals, want 20 to 40: %v", len(at), at)
		}
		prev := time.Duration(0)
		for i, a := range at {
			if gap := a - prev; gap < interval/2 || gap > interval {
				t.Errorf("rescue %d came %v after the previous (or the start), want [%v, %v]", i, gap, interval/2, interval)
			}
			prev = a
		}
		if got := log.String(); strings.Count(got, "teststore: rescuing expired leases failed") != 1 ||
			!strings.Contains(got, "connection refused") {
			t.Errorf("log %q, want the one failure", got)
		}
	})
}

// TestRescueLoopQuietOnCancel: a rescue cut short by the loop's own
// context ending is not logged as a failure.
func TestRescueLoopQuietOnCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		var log syncBuffer
		done := make(chan struct{})
		go func() {
			defer close(done)
			RescueLoop(ctx, time.Second, func(ctx context.Context) (int, error) {
				cancel()
				return 0, ctx.Err()
			}, slog.New(slog.NewTextHandler(&log, nil)), "teststore")
		}()
		<-done
		if got := log.String(); got != "" {
			t.Errorf("log %q after a cancelled rescue, want nothing", got)
		}
	})
}

// TestSleep: Sleep waits its time, or returns false as soon as ctx ends.
func TestSleep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		if !Sleep(context.Background(), time.Minute) || time.Since(start) != time.Minute {
			t.Fatalf("Sleep(1m) returned after %v", time.Since(start))
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start = time.Now()
		if Sleep(ctx, time.Minute) || time.Since(start) != time.Second {
			t.Fatalf("Sleep with a context ending after 1s returned true or after %v", time.Since(start))
		}
	})
}
