package durable

import (
	"bytes"
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

// syncBuffer is a log sink safe for the loop's goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// fakeElection records the calls of a Leader's loop; answer decides each
// election's result from the time since the bubble started.
type fakeElection struct {
	mu       sync.Mutex
	start    time.Time
	elects   []time.Duration // when Elect was called
	renews   []bool          // its renew argument
	janitors []time.Duration // when Janitor was called
	answer   func(at time.Duration) (bool, error)
	log      syncBuffer
}

func newFakeElection(answer func(at time.Duration) (bool, error)) *fakeElection {
	return &fakeElection{start: time.Now(), answer: answer}
}

func (f *fakeElection) election(ttl, janitor time.Duration) Election {
	return Election{
		TTL: ttl, JanitorInterval: janitor, Pkg: "teststore",
		Log: slog.New(slog.NewTextHandler(&f.log, nil)),
		Elect: func(ctx context.Context, renew bool) (bool, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			at := time.Since(f.start)
			f.elects = append(f.elects, at)
			f.renews = append(f.renews, renew)
			return f.answer(at)
		},
		Janitor: func(ctx context.Context) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.janitors = append(f.janitors, time.Since(f.start))
		},
	}
}

func (f *fakeElection) calls() (elects []time.Duration, renews []bool, janitors []time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Duration(nil), f.elects...), append([]bool(nil), f.renews...), append([]time.Duration(nil), f.janitors...)
}

// runLeader runs l in the bubble and returns a function that stops it and
// waits for Run to return.
func runLeader(l *Leader, e Election) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.Run(ctx, e)
	}()
	return func() {
		cancel()
		<-done // closed: stop may be called again
	}
}

func durations(ds ...time.Duration) []time.Duration { return ds }

func equalDurations(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestLeaderRenewsEveryThirdAndRunsJanitor: a process that wins takes the
// leadership at once, renews it every third of the TTL, and runs the
// janitor at once and then every janitor interval while it leads.
func TestLeaderRenewsEveryThirdAndRunsJanitor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeElection(func(time.Duration) (bool, error) { return true, nil })
		var l Leader
		stop := runLeader(&l, f.election(3*time.Second, 2*time.Second))
		queuetest.Advance(5500 * time.Millisecond)
		if !l.Leading() {
			t.Error("not leading after winning every election")
		}
		stop()
		elects, renews, janitors := f.calls()
		if want := durations(0, time.Second, 2*time.Second, 3*time.Second, 4*time.Second, 5*time.Second); !equalDurations(elects, want) {
			t.Errorf("elections at %v, want %v", elects, want)
		}
		for i, r := range renews {
			if r != (i > 0) {
				t.Errorf("election %d: renew %v, want %v", i, r, i > 0)
			}
		}
		if want := durations(0, 2*time.Second, 4*time.Second); !equalDurations(janitors, want) {
			t.Errorf("janitor at %v, want %v", janitors, want)
		}
		if got := f.log.String(); strings.Count(got, "teststore: leading") != 1 {
			t.Errorf("log %q, want one \"teststore: leading\"", got)
		}
	})
}

// TestLeaderStandbyPolls: a process that loses tries again every tenth of
// the TTL, at most every MaxStandbyPoll, and never runs the janitor.
func TestLeaderStandbyPolls(t *testing.T) {
	for _, tc := range []struct {
		ttl, every time.Duration
	}{
		{2 * time.Second, 200 * time.Millisecond}, // TTL/10
		{10 * time.Second, MaxStandbyPoll},        // capped
	} {
		t.Run(tc.ttl.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFakeElection(func(time.Duration) (bool, error) { return false, nil })
				var l Leader
				stop := runLeader(&l, f.election(tc.ttl, time.Second))
				queuetest.Advance(5*tc.every + tc.every/2)
				if l.Leading() {
					t.Error("leading after losing every election")
				}
				stop()
				elects, renews, janitors := f.calls()
				var want []time.Duration
				for i := range 6 {
					want = append(want, time.Duration(i)*tc.every)
				}
				if !equalDurations(elects, want) {
					t.Errorf("elections at %v, want %v", elects, want)
				}
				for i, r := range renews {
					if r {
						t.Errorf("election %d asked to renew a leadership never held", i)
					}
				}
				if len(janitors) != 0 {
					t.Errorf("janitor ran at %v without leading", janitors)
				}
			})
		})
	}
}

// TestLeaderKeepsTermThroughFailedRenewals: a renewal that fails (the
// server did not answer) keeps the process leading until its term, counted
// from before it asked, ends; it retries every standby poll, stops the
// janitor when the term ends, and leads again when an election succeeds.
func TestLeaderKeepsTermThroughFailedRenewals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 3 * time.Second // renew every 1 s, standby 300 ms
		down := errors.New("connection refused")
		f := newFakeElection(func(at time.Duration) (bool, error) {
			if at >= time.Second && at < 5*time.Second {
				return false, down
			}
			return true, nil
		})
		var l Leader
		stop := runLeader(&l, f.election(ttl, 500*time.Millisecond))
		defer stop()
		queuetest.Advance(2900 * time.Millisecond) // the term won at 0 ends at 3 s
		if !l.Leading() {
			t.Fatal("lost leadership before its term ended")
		}
		queuetest.Advance(200 * time.Millisecond)
		if l.Leading() {
			t.Fatal("still leading after the term ended without a renewal")
		}
		queuetest.Advance(2200 * time.Millisecond) // the server answers from 5 s: the retry at 5.2 s wins
		if !l.Leading() {
			t.Fatal("not leading again after a successful election")
		}
		stop()
		elects, _, janitors := f.calls()
		want := durations(0, time.Second) // then retries every 300 ms until one at or after 5 s
		for at := time.Second + 300*time.Millisecond; at < 5*time.Second+300*time.Millisecond; at += 300 * time.Millisecond {
			want = append(want, at)
		}
		if !equalDurations(elects[:len(want)], want) {
			t.Errorf("elections at %v, want %v first", elects, want)
		}
		for _, at := range janitors {
			if at >= 3*time.Second && at < 5*time.Second {
				t.Errorf("janitor ran at %v, outside any term", at)
			}
		}
		if got := f.log.String(); strings.Count(got, "teststore: leader election failed") < 10 ||
			strings.Count(got, "teststore: leading") != 2 {
			t.Errorf("log %q, want the failures and two \"teststore: leading\"", got)
		}
	})
}

// TestLeaderLost: an election that says another process leads ends this
// process's term at once, and the loss is logged.
func TestLeaderLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeElection(func(at time.Duration) (bool, error) { return at == 0, nil })
		var l Leader
		stop := runLeader(&l, f.election(3*time.Second, time.Second))
		defer stop()
		queuetest.Advance(500 * time.Millisecond)
		if !l.Leading() {
			t.Fatal("not leading after winning")
		}
		queuetest.Advance(600 * time.Millisecond) // the renewal at 1 s loses
		if l.Leading() {
			t.Fatal("still leading after a renewal found another leader")
		}
		stop()
		if got := f.log.String(); !strings.Contains(got, "teststore: leadership lost") {
			t.Errorf("log %q, want \"teststore: leadership lost\"", got)
		}
	})
}

// TestLeaderResign: Resign ends the term and says whether there was one.
func TestLeaderResign(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var l Leader
		if l.Leading() || l.Resign() {
			t.Fatal("the zero Leader leads")
		}
		f := newFakeElection(func(time.Duration) (bool, error) { return true, nil })
		stop := runLeader(&l, f.election(time.Second, time.Second))
		defer stop()
		synctest.Wait()
		stop()
		if !l.Leading() {
			t.Fatal("not leading after winning")
		}
		if !l.Resign() {
			t.Fatal("Resign while leading returned false")
		}
		if l.Leading() || l.Resign() {
			t.Fatal("leading after Resign")
		}
	})
}

// TestLeaderStopsWithContext: Run returns when its context ends, also in
// the middle of an election.
func TestLeaderStopsWithContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		var l Leader
		done := make(chan struct{})
		e := Election{TTL: time.Second, JanitorInterval: time.Second, Pkg: "teststore",
			Log: slog.New(slog.DiscardHandler),
			Elect: func(ctx context.Context, _ bool) (bool, error) {
				<-ctx.Done()
				return false, ctx.Err()
			},
			Janitor: func(context.Context) {},
		}
		go func() {
			defer close(done)
			l.Run(ctx, e)
		}()
		synctest.Wait()
		cancel()
		<-done
	})
}
