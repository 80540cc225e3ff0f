package pgstore

import (
	"testing"
	"time"
)

func TestClaimHint(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	k := func(prio int, sec int, id int64) claimKey {
		return claimKey{prio: prio, runAt: t0.Add(time.Duration(sec) * time.Second), id: id}
	}
	type want struct {
		ok  bool
		key claimKey
	}
	check := func(t *testing.T, h *claimHint, gen uint64, pending bool, now time.Time, w want) uint64 {
		t.Helper()
		prio, runAt, id, ok, epoch := h.start(gen, pending, now)
		if ok != w.ok {
			t.Fatalf("hint held: %v, want %v", ok, w.ok)
		}
		if ok && (claimKey{prio, runAt, id}) != w.key {
			t.Fatalf("hint %v/%v/%d, want %+v", prio, runAt, id, w.key)
		}
		return epoch
	}

	t.Run("the least key taken, while nothing woke the fetcher", func(t *testing.T) {
		var h claimHint
		e := check(t, &h, 1, false, t0, want{})
		h.done(1, e, false, []claimKey{k(0, 5, 9), k(0, 3, 12), k(0, 3, 11)}, 10, t0)
		check(t, &h, 1, false, t0, want{true, k(0, 3, 11)})
		check(t, &h, 2, false, t0, want{})              // a wake-up taken since
		check(t, &h, 1, true, t0, want{})               // a wake-up waiting
		check(t, &h, 1, false, t0.Add(hintTTL), want{}) // too old
		check(t, &h, 1, false, t0.Add(hintTTL-1), want{true, k(0, 3, 11)})
	})

	t.Run("a claim from the hint short of jobs drops it", func(t *testing.T) {
		var h claimHint
		e := check(t, &h, 1, false, t0, want{})
		h.done(1, e, false, []claimKey{k(0, 1, 1)}, 1, t0)
		e = check(t, &h, 1, false, t0, want{true, k(0, 1, 1)})
		h.done(1, e, true, []claimKey{k(0, 2, 2)}, 5, t0)
		check(t, &h, 1, false, t0, want{})
		// Without the hint, a short claim took every job it could: the
		// least of them is a hint.
		e = check(t, &h, 1, false, t0, want{})
		h.done(1, e, false, []claimKey{k(0, 2, 2)}, 5, t0)
		check(t, &h, 1, false, t0, want{true, k(0, 2, 2)})
		// A claim that took nothing sets nothing.
		h.done(1, e, false, nil, 5, t0)
		check(t, &h, 1, false, t0, want{})
	})

	t.Run("a failed claim drops it, and a claim started before sets nothing", func(t *testing.T) {
		var h claimHint
		e := check(t, &h, 1, false, t0, want{})
		h.done(1, e, false, []claimKey{k(0, 1, 1)}, 1, t0)
		before := check(t, &h, 1, false, t0, want{true, k(0, 1, 1)})
		h.invalidate()
		check(t, &h, 1, false, t0, want{})
		h.done(1, before, true, []claimKey{k(0, 2, 2)}, 1, t0)
		check(t, &h, 1, false, t0, want{})
	})

	t.Run("the last claim's key, ahead or behind", func(t *testing.T) {
		var h claimHint
		e := check(t, &h, 1, false, t0, want{})
		h.done(1, e, false, []claimKey{k(1, 0, 7)}, 1, t0)
		h.done(1, e, false, []claimKey{k(1, 0, 9)}, 1, t0)
		check(t, &h, 1, false, t0, want{true, k(1, 0, 9)})
		// Priority first, then run_at, then ID.
		h.done(1, e, false, []claimKey{k(1, 1, 3), k(0, 9, 99), k(1, 0, 1)}, 3, t0)
		check(t, &h, 1, false, t0, want{true, k(0, 9, 99)})
		h.done(2, e, false, []claimKey{k(0, 10, 100)}, 1, t0)
		check(t, &h, 2, false, t0, want{true, k(0, 10, 100)})
	})
}
