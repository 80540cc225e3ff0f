package redisstore

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/queuetest"
	"github.com/queuekit/queue/storekit"
)

// TestAddBatch runs one add script call whose jobs depend on each other:
// a later job of the batch must see an earlier one's key, group, capacity
// use and ID, exactly as if each had its own call.
func TestAddBatch(t *testing.T) {
	c := needRedis(t)
	clk := queuetest.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	s := openStoreCfg(t, c, clk, func(cfg *storekit.Config) { cfg.Capacity = 3 }, WithPrefix(testPrefix(t, c)))
	ctx := context.Background()
	sh := s.shards[0]
	later := ms(clk.Now().Add(time.Minute))
	item := func(key, group string, due int64) addItem {
		it := newAddItem(t, sh, "normal", due)
		it.key, it.group = key, group
		return it
	}
	a := item("", "", 0)
	items := []addItem{
		a,
		item("k", "", 0),     // ready, holds k
		item("k", "", 0),     // dup of the one before
		item("", "g", later), // scheduled, holds g
		item("", "g", later), // dup: g is scheduled
		a,                    // the same ID again: seen
		item("", "", 0),      // ready: the third
		item("", "", 0),      // full
	}
	got, err := s.runAdd(ctx, sh, items)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"ready", "ready", "dup", "sched", "dup", "seen", "ready", "full"}
	for i := range want {
		if i >= len(got) || got[i] != want[i] {
			t.Fatalf("statuses = %q, want %q", got, want)
		}
	}
	st, err := s.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Ready != 3 || st.Scheduled != 1 || st.PendingKeys != 1 || s.Len() != 3 {
		t.Fatalf("Stats = %+v, Len %d; want 3 ready, 1 scheduled, 1 pending key", st, s.Len())
	}
	if n := c.LLen(ctx, sh.ks.fixed[kWake]).Val(); n != 4 {
		t.Fatalf("%d wake-up tokens, want one per ready job and one for the earliest scheduled", n)
	}
	// FIFO within the batch, and the refused jobs' IDs are free again.
	for _, id := range []int64{items[0].id, items[1].id, items[6].id} {
		j, err := s.Claim(ctx)
		if err != nil || j.ID != id {
			t.Fatalf("Claim = %d, %v; want %d", j.ID, err, id)
		}
		must(t, s.Complete(ctx, j))
	}
	got, err = s.runAdd(ctx, sh, []addItem{items[2], items[7]})
	if err != nil || got[0] != "ready" || got[1] != "ready" {
		t.Fatalf("re-adding the refused jobs = %q, %v; want both ready", got, err)
	}
}

// TestAddReadyBatch: the same for a batch of plain jobs, which the
// add-ready script takes, over two priorities.
func TestAddReadyBatch(t *testing.T) {
	c := needRedis(t)
	clk := queuetest.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	s := openStoreCfg(t, c, clk, func(cfg *storekit.Config) { cfg.Capacity = 3 }, WithPrefix(testPrefix(t, c)))
	ctx := context.Background()
	sh := s.shards[0]
	item := func(label string) addItem { return newAddItem(t, sh, label, ms(clk.Now())) }
	a := item("normal")
	items := []addItem{a, item("low"), a, item("high"), item("normal")}
	items[1].seq += seenBits // another seen bitmap
	for i := range items {
		if !sh.plain(&items[i], s.now()) {
			t.Fatalf("item %d is not plain", i)
		}
	}
	got, err := s.runAdd(ctx, sh, items)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"ready", "ready", "seen", "ready", "full"}
	for i := range want {
		if i >= len(got) || got[i] != want[i] {
			t.Fatalf("statuses = %q, want %q", got, want)
		}
	}
	st, err := s.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Ready != 3 || s.Len() != 3 || st.ReadyByPriority["normal"] != 1 || st.ReadyByPriority["low"] != 1 {
		t.Fatalf("Stats = %+v, Len %d; want 3 ready, one per priority", st, s.Len())
	}
	if n := c.LLen(ctx, sh.ks.fixed[kWake]).Val(); n != 3 {
		t.Fatalf("%d wake-up tokens, want one per ready job", n)
	}
	for _, it := range []addItem{items[3], items[0], items[1]} {
		j, err := s.Claim(ctx)
		if err != nil || j.ID != it.id || j.Priority != it.label || j.Payload != 1 {
			t.Fatalf("Claim = %+v, %v; want job %d of %s", j, err, it.id, it.label)
		}
		must(t, s.Complete(ctx, j))
	}
	got, err = s.runAdd(ctx, sh, []addItem{items[4], items[1]})
	if err != nil || got[0] != "ready" || got[1] != "seen" {
		t.Fatalf("adding the refused job and a done one = %q, %v; want ready, seen", got, err)
	}
}

// TestAddMetaStrings: keys, groups, targets and errors of any bytes come
// back from the meta record the client encoded byte for byte, so a
// released key matches its pending-key entry.
func TestAddMetaStrings(t *testing.T) {
	c := needRedis(t)
	s := openStore(t, c, nil, WithPrefix(testPrefix(t, c)))
	ctx := context.Background()
	for _, key := range []string{`q"uo\te`, "ctl\x00\x01\n\r\t\x1f\x7f", "ünï ☃", "bad\xff\xfeutf8", "/slash</script>&"} {
		target := key // a target must be valid UTF-8 without NUL (ErrInvalidJob); keys and groups may hold any bytes
		if !utf8.ValidString(key) || strings.IndexByte(key, 0) >= 0 {
			target = "odd"
		}
		a, err := s.Add(ctx, queue.Job[int]{Key: key, Group: key, Target: target, Payload: 1})
		if err != nil {
			t.Fatalf("Add(%q): %v", key, err)
		}
		if _, err := s.Add(ctx, queue.Job[int]{Key: key, Payload: 2}); err != queue.ErrDuplicate {
			t.Fatalf("second Add(%q) = %v, want ErrDuplicate", key, err)
		}
		j, err := s.Claim(ctx)
		if err != nil || j.ID != a.ID || j.Key != key || j.Group != key || j.Target != target {
			t.Fatalf("Claim = %+v, %v; want job %d with key %q", j, err, a.ID, key)
		}
		must(t, s.Complete(ctx, j))
		if n := c.HLen(ctx, s.shards[0].ks.fixed[kKeys]).Val(); n != 0 {
			t.Fatalf("key %q still pending after Complete", key)
		}
	}
	// The prefix is JSON that Go reads too.
	it := addItem{key: "k\"\\\x00\xff", group: "g", target: "t", label: "normal", due: 12, attempt: 2, max: 5, lastErr: "e\n"}
	var m meta
	if err := json.Unmarshal(append(appendMetaPrefix(nil, &it), `q"}`...), &m); err != nil {
		t.Fatal(err)
	}
	if m.Key != "k\"\\\x00\ufffd" || m.Group != "g" || m.Target != "t" || m.Priority != "normal" || m.RunAt != 12 ||
		m.Attempt != 2 || m.Max != 5 || m.Err != "e\n" || m.State != "q" {
		t.Fatalf("meta = %+v", m)
	}
}

// TestAddOne: a lone plain job goes to the add-one script, which applies
// add-ready's rules: seen, full, a wake-up token while its list is short,
// at most 64 tokens.
func TestAddOne(t *testing.T) {
	c := needRedis(t)
	clk := queuetest.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	s := openStoreCfg(t, c, clk, func(cfg *storekit.Config) { cfg.Capacity = 2 }, WithPrefix(testPrefix(t, c)))
	ctx := context.Background()
	sh := s.shards[0]
	item := func(label string) addItem { return newAddItem(t, sh, label, ms(clk.Now())) }
	wake := sh.ks.fixed[kWake]
	a, b := item("low"), item("high")
	// b in another seen bitmap, under a block registered there.
	b.seq, b.blk = b.seq+seenBits, b.blk+seenBits
	bkey, _ := sh.ks.seen(b.seq)
	must(t, c.BitField(ctx, bkey, "SET", regType, regOffset(b.seq/seenBits, b.blk), sh.tokenN).Err())
	for i, tc := range []struct {
		it     addItem
		status string
		tokens int64
	}{{a, "ready", 1}, {a, "seen", 1}, {b, "ready", 2}, {item("normal"), "full", 2}} {
		got, err := s.runAdd(ctx, sh, []addItem{tc.it})
		if err != nil || len(got) != 1 || got[0] != tc.status {
			t.Fatalf("add %d = %q, %v; want %s", i, got, err, tc.status)
		}
		if n := c.LLen(ctx, wake).Val(); n != tc.tokens {
			t.Fatalf("after add %d: %d wake-up tokens, want %d", i, n, tc.tokens)
		}
	}
	if s.Len() != 2 {
		t.Fatalf("Len = %d, want 2", s.Len())
	}
	for _, it := range []addItem{b, a} {
		j, err := s.Claim(ctx)
		if err != nil || j.ID != it.id || j.Priority != it.label || j.Payload != 1 {
			t.Fatalf("Claim = %+v, %v; want job %d of %s", j, err, it.id, it.label)
		}
		must(t, s.Complete(ctx, j))
	}
	// A job among the first 64 of its list pushes a token, but the wake
	// list keeps at most 64.
	for _, before := range []int64{64, 62} {
		must(t, c.Del(ctx, wake).Err())
		for range before {
			must(t, c.RPush(ctx, wake, "1").Err())
		}
		if got, err := s.runAdd(ctx, sh, []addItem{item("normal")}); err != nil || got[0] != "ready" {
			t.Fatalf("add = %q, %v", got, err)
		}
		if n, want := c.LLen(ctx, wake).Val(), min(before+1, 64); n != want {
			t.Fatalf("%d wake-up tokens before the add, %d after; want %d", before, n, want)
		}
	}
}

// TestAddOneStale: add-one refuses, with 'stale', a job whose block is
// not registered to the caller in its seen bitmap (Redis lost it, or
// another process reserved the numbers since), and leaves the job's seen
// bit as it found it: set, when it is another process's job's.
func TestAddOneStale(t *testing.T) {
	c := needRedis(t)
	clk := queuetest.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	s := openStoreCfg(t, c, clk, nil, WithPrefix(testPrefix(t, c)))
	ctx := context.Background()
	sh := s.shards[0]
	it := newAddItem(t, sh, "normal", ms(clk.Now()))
	key, off := sh.ks.seen(it.seq)
	reg := regOffset(it.seq/seenBits, it.blk)
	for _, tc := range []struct {
		token int64 // the block's registration
		bit   int64 // the job's seen bit before
	}{{0, 0}, {0, 1}, {sh.tokenN ^ 2, 0}, {sh.tokenN ^ 2, 1}} {
		must(t, c.BitField(ctx, key, "SET", regType, reg, tc.token, "SET", "u1", off, tc.bit).Err())
		got, err := s.runAdd(ctx, sh, []addItem{it})
		if err != nil || len(got) != 1 || got[0] != "stale" {
			t.Fatalf("registration %d, bit %d: add = %q, %v; want stale", tc.token, tc.bit, got, err)
		}
		if bit := c.GetBit(ctx, key, off).Val(); bit != tc.bit {
			t.Fatalf("registration %d: seen bit %d after a stale add, want %d as before", tc.token, bit, tc.bit)
		}
	}
	if st, err := s.Stats(ctx); err != nil || st.Ready != 0 {
		t.Fatalf("Stats = %+v, %v; want nothing ready", st, err)
	}
	// Registered again: added.
	must(t, c.BitField(ctx, key, "SET", regType, reg, sh.tokenN, "SET", "u1", off, 0).Err())
	if got, err := s.runAdd(ctx, sh, []addItem{it}); err != nil || got[0] != "ready" {
		t.Fatalf("add = %q, %v; want ready", got, err)
	}
}

// newAddItem returns a plain job for the add scripts, with an ID of a
// block the shard reserved, due at due (ms) in the priority label.
func newAddItem(t *testing.T, sh *shard, label string, due int64) addItem {
	t.Helper()
	id, seq, blk, err := sh.newID(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return addItem{id: id, seq: seq, blk: blk, label: label, due: due, enc: []byte("1")}
}
