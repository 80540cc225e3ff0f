package durable

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"time"
)

// Jitter returns a wait drawn uniformly from [d/2, d]: processes started
// together that each wait Jitter(d) between their calls spread them over
// half an interval, and none waits longer than d.
func Jitter(d time.Duration) time.Duration {
	return d/2 + rand.N(d-d/2+1)
}

// Sleep waits d of real time; false if ctx ended first.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// RescueLoop calls rescue every interval, in every process of a queue
// (leader or not), until ctx ends: a dead worker's jobs run again within
// the lease TTL plus the interval whether or not the leader died with it.
// Each wait is Jitter(interval), the first too, so that processes started
// together spread their calls and a test that calls rescue itself can
// keep the loop away with a long interval. The store's rescue must move
// each expired lease once, whichever process runs it first. A failure is
// logged as "<pkg>: rescuing expired leases failed" and retried at the
// next interval.
func RescueLoop(ctx context.Context, interval time.Duration, rescue func(context.Context) (int, error), log *slog.Logger, pkg string) {
	for Sleep(ctx, Jitter(interval)) {
		if _, err := rescue(ctx); err != nil && ctx.Err() == nil {
			log.Warn(pkg+": rescuing expired leases failed", "err", err)
		}
	}
}
