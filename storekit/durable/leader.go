package durable

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// MaxStandbyPoll bounds how long a process that does not lead waits
// between its attempts to take the leadership.
const MaxStandbyPoll = 500 * time.Millisecond

// Election is what a store gives Leader.Run.
type Election struct {
	// TTL is the leader's term (WithLeaderTTL). The leader renews every
	// third of it; the others try to take it every tenth, at most every
	// MaxStandbyPoll, so a leader that dies is replaced within
	// TTL + min(TTL/10, MaxStandbyPoll).
	TTL time.Duration
	// JanitorInterval is how often the leader runs Janitor.
	JanitorInterval time.Duration
	// Elect takes the leadership (renew false) or renews it (renew true)
	// for TTL, counted by the store's server, and reports whether this
	// process leads. An error keeps a leader leading until its term ends.
	Elect func(ctx context.Context, renew bool) (bool, error)
	// Janitor is the leader's maintenance, run when the process becomes
	// leader and then every JanitorInterval while it leads.
	Janitor func(ctx context.Context)
	// Log receives the changes of leadership and the failed elections,
	// each message starting with Pkg.
	Log *slog.Logger
	// Pkg is the store's package name, which starts each log message.
	Pkg string
}

// Leader is one process's view of its queue's leadership. Its zero value
// does not lead; Run elects. A process counts its term from before it
// asked, on its own monotonic clock, so that it stops believing it leads
// no later than the server lets the term lapse: two processes never both
// believe they lead (but for clocks running at different rates).
type Leader struct {
	mu    sync.Mutex
	until time.Time // end of this process's term; zero when not leading
}

// Leading reports whether this process leads now.
func (l *Leader) Leading() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return time.Now().Before(l.until)
}

// Resign ends this process's term and reports whether it was leading, so
// that the store gives the leadership up on its server at once rather
// than letting it lapse.
func (l *Leader) Resign() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	was := time.Now().Before(l.until)
	l.until = time.Time{}
	return was
}

func (l *Leader) setUntil(t time.Time) {
	l.mu.Lock()
	l.until = t
	l.mu.Unlock()
}

// Run elects, renews and, while leading, runs the janitor, until ctx
// ends. It does not resign: the store does, with Resign, once its other
// work has stopped.
func (l *Leader) Run(ctx context.Context, e Election) {
	renewEvery := e.TTL / 3
	standby := min(e.TTL/10, MaxStandbyPoll)
	var nextElect, nextJanitor time.Time // zero: at once
	for {
		if !time.Now().Before(nextElect) {
			nextElect = l.elect(ctx, e, standby, renewEvery)
			if ctx.Err() != nil {
				return
			}
		}
		wake := nextElect
		if l.Leading() {
			if !time.Now().Before(nextJanitor) {
				e.Janitor(ctx)
				nextJanitor = time.Now().Add(e.JanitorInterval)
			}
			wake = minTime(wake, nextJanitor)
		}
		if !Sleep(ctx, max(time.Until(wake), time.Millisecond)) {
			return
		}
	}
}

// elect runs one election and returns when the next is due: a renewal
// every third of the TTL while leading, another attempt after standby
// otherwise or after a failure.
func (l *Leader) elect(ctx context.Context, e Election, standby, renewEvery time.Duration) time.Time {
	leading := l.Leading()
	sent := time.Now()
	ok, err := e.Elect(ctx, leading)
	if ctx.Err() != nil {
		return time.Time{}
	}
	switch {
	case err != nil:
		e.Log.Warn(e.Pkg+": leader election failed", "err", err)
	case ok:
		if !leading {
			e.Log.Info(e.Pkg + ": leading")
		}
		l.setUntil(sent.Add(e.TTL))
		return sent.Add(renewEvery)
	case leading:
		e.Log.Warn(e.Pkg + ": leadership lost")
		l.setUntil(time.Time{})
	}
	return time.Now().Add(standby)
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
