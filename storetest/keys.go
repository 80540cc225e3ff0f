package storetest

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/queuekit/queue"
)

// oddKeys are keys (and groups) a store must accept as they are: long
// (beyond what a database index entry holds), with a NUL byte, not UTF-8,
// and two that differ from the long one only in their last byte.
func oddKeys() []string {
	// Not a repetition, which a database would compress to fit an index.
	var b strings.Builder
	for i := range 9_999 / 8 {
		fmt.Fprintf(&b, "%08x", uint32(i)*2654435761)
	}
	long := b.String() + strings.Repeat("k", 9_999-b.Len())
	return []string{long + "a", long + "b", "a\x00b", "a\xffb", "\xfe\xff", "k\x00"}
}

// testOddKeys: keys and groups of any bytes and any length are kept,
// deduplicated and handed back unchanged.
func testOddKeys(t *testing.T, h *harness) {
	keys := oddKeys()
	ids := map[int64]string{}
	for i, k := range keys {
		a, err := h.Store.Add(bg, queue.Job[Payload]{Key: k, Group: k, Payload: Payload{N: i}})
		if err != nil {
			t.Fatalf("Add with key and group %.40q (len %d): %v", k, len(k), err)
		}
		ids[a.ID] = k
	}
	for _, k := range keys {
		addErr(t, h, queue.Job[Payload]{Key: k}, queue.ErrDuplicate)
	}
	for range keys {
		j := claim(t, h)
		if want := keys[j.Payload.N]; j.Key != want || j.Group != want || ids[j.ID] != want {
			t.Fatalf("claimed job %d: key %.40q (len %d), group %.40q; want %.40q (len %d)",
				j.ID, j.Key, len(j.Key), j.Group, want, len(want))
		}
		// A running key takes one coalesced rerun.
		if a := add(t, h, queue.Job[Payload]{Key: j.Key, Payload: Payload{N: j.Payload.N}}); !a.Coalesced {
			t.Fatalf("Add of running key %.40q: %+v, want Coalesced", j.Key, a)
		}
		must(t, "Complete", h.Store.Complete(bg, j))
	}
	for range keys {
		j := claim(t, h)
		if want := keys[j.Payload.N]; j.Key != want {
			t.Fatalf("claimed rerun: key %.40q, want %.40q", j.Key, want)
		}
		must(t, "Complete", h.Store.Complete(bg, j))
	}
	// Scheduled: the group holds; the schedule lists the key and group;
	// Cancel finds the key.
	later := h.Clock.Now().Add(time.Minute)
	for i, k := range keys {
		if _, err := h.Store.Add(bg, queue.Job[Payload]{Key: k, Group: k, RunAt: later, Payload: Payload{N: i}}); err != nil {
			t.Fatalf("Add scheduled with key and group %.40q (len %d): %v", k, len(k), err)
		}
		addErr(t, h, queue.Job[Payload]{Key: k + "/2", Group: k, RunAt: later}, queue.ErrDuplicate)
	}
	sched, err := h.Store.Scheduled(bg, 100)
	must(t, "Scheduled", err)
	seen := map[string]bool{}
	for _, s := range sched {
		if s.Key != s.Group {
			t.Fatalf("scheduled job %d: key %.40q, group %.40q; want both the same", s.ID, s.Key, s.Group)
		}
		seen[s.Key] = true
	}
	for _, k := range keys {
		if !seen[k] {
			t.Fatalf("Scheduled lists no job with key %.40q (len %d)", k, len(k))
		}
		if n, err := h.Store.Cancel(bg, k); err != nil || n != 1 {
			t.Fatalf("Cancel(%.40q) = %d, %v; want 1", k, n, err)
		}
	}
	h.Clock.Advance(time.Minute)
	promote(t, h)
	noClaim(t, h)
	// A unique window holds an odd key too.
	for _, k := range keys {
		if _, err := h.Store.Add(bg, queue.Job[Payload]{Key: k, UniqueFor: time.Hour}); err != nil {
			t.Fatalf("Add with a window, key %.40q: %v", k, err)
		}
	}
	for range keys {
		must(t, "Complete", h.Store.Complete(bg, claim(t, h)))
	}
	for _, k := range keys {
		if _, err := h.Store.Add(bg, queue.Job[Payload]{Key: k}); !errors.Is(err, queue.ErrDuplicate) {
			t.Fatalf("Add of key %.40q in its window = %v, want ErrDuplicate", k, err)
		}
	}
}
