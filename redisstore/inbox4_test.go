package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/storekit"
)

// TestInboxPriorityLists: processes that list different priorities share
// one inbox; an entry names its ready list by label, so a process that
// drains it puts each job in the list of its priority, one it does not
// serve included (reached by name, a drain key it learns).
func TestInboxPriorityLists(t *testing.T) {
	c := needRedis(t)
	prefix := testPrefix(t, c)
	ctx := context.Background()
	a := openStore(t, c, nil, idleOpts(prefix)...) // high, normal, low
	b := openStoreCfg(t, c, nil, func(cfg *storekit.Config) {
		cfg.Priorities = []queue.Priority{{Name: "low", Weight: 0}, {Name: "normal", Weight: 5}}
	}, idleOpts(prefix)...)
	if _, err := a.Add(ctx, queue.Job[int]{Payload: 0, Priority: "low"}); err != nil { // the grant
		t.Fatal(err)
	}
	ids := map[string]int64{}
	sh := a.shards[0]
	for i, p := range []string{"high", "normal", "low"} {
		p0 := sh.permits
		got, err := a.Add(ctx, queue.Job[int]{Payload: i + 1, Priority: p})
		if err != nil {
			t.Fatal(err)
		}
		if sh.permits != p0-1 {
			t.Fatalf("the %s job did not go to the inbox", p)
		}
		ids[p] = got.ID
	}
	// b drains the inbox.
	st, err := b.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.ReadyByPriority["low"] != 2 || st.ReadyByPriority["normal"] != 1 {
		t.Fatalf("b's Stats = %+v; want 2 low, 1 normal", st)
	}
	for p, id := range ids {
		list := sh.ks.tag + ":ready:" + p
		if got, err := c.LRange(ctx, list, -1, -1).Result(); err != nil || len(got) != 1 || got[0] != fmt.Sprint(id) {
			t.Fatalf("the tail of %s is %v, %v; want job %d", list, got, err, id)
		}
	}
	st, err = a.Stats(ctx)
	if err != nil || st.ReadyByPriority["high"] != 1 || st.Ready != 4 {
		t.Fatalf("a's Stats = %+v, %v; want 1 high, 4 ready", st, err)
	}
	samePayloads(t, "by priority", claimOrder(t, a, 4), []int{1, 2, 0, 3})
}

// TestInboxFreshEpochs: an inbox revoked is never opened again under its
// name, so permits granted for it find no inbox afterwards; every call
// that may open one names a new epoch.
func TestInboxFreshEpochs(t *testing.T) {
	c := needRedis(t)
	prefix := testPrefix(t, c)
	ctx := context.Background()
	a := openStore(t, c, nil, idleOpts(prefix)...)
	b := openStore(t, c, nil, idleOpts(prefix)...)
	inboxes := a.shards[0].ks.fixed[kInboxes]
	if _, err := a.Add(ctx, queue.Job[int]{Payload: 0}); err != nil { // opens the inbox
		t.Fatal(err)
	}
	e1 := c.HGet(ctx, inboxes, "epoch").Val()
	// a's reply is as good as lost: a forgets the inbox and its permits.
	none := a.shards[0].ks.inboxKey(noInbox)
	a.shards[0].inbox.Store(&none)
	a.shards[0].dropPermits(a.shards[0].ks.inboxKey(e1))
	if _, err := b.Add(ctx, queue.Job[int]{Payload: 1}); err != nil { // b learns e1 and takes permits
		t.Fatal(err)
	}
	if b.shards[0].permits == 0 || b.shards[0].permitKey != b.shards[0].ks.inboxKey(e1) {
		t.Fatalf("b holds %d permits on %q; want some on inbox %s", b.shards[0].permits, b.shards[0].permitKey, e1)
	}
	if err := a.runInbox(ctx, a.shards[0], true); err != nil { // revoked
		t.Fatal(err)
	}
	if _, err := a.Add(ctx, queue.Job[int]{Payload: 2}); err != nil { // opens the next inbox
		t.Fatal(err)
	}
	e2 := c.HGet(ctx, inboxes, "epoch").Val()
	if e2 == "" || e2 == e1 {
		t.Fatalf("the inbox reopened as %q after %q was revoked; want a new name", e2, e1)
	}
	p0 := b.shards[0].permits
	if _, err := b.Add(ctx, queue.Job[int]{Payload: 3}); err != nil {
		t.Fatal(err)
	}
	if b.shards[0].permitKey == b.shards[0].ks.inboxKey(e1) && b.shards[0].permits == p0-1 {
		t.Fatal("a permit of the revoked inbox was used")
	}
	res, _ := c.HGet(ctx, a.shards[0].ks.fixed[kCount], "res").Int64()
	if held := a.shards[0].permits + b.shards[0].permits; res != held {
		t.Fatalf("res = %d; want the %d permits the processes hold", res, held)
	}
	samePayloads(t, "after the revoke", claimOrder(t, a, 4), []int{0, 1, 2, 3})
}

// TestInboxStress: producers (plain jobs, through the inbox, and keyed
// ones, through the add script), consumers and a canceller work on one
// queue at once; afterwards every job was either run exactly once or
// cancelled, and nothing is left.
func TestInboxStress(t *testing.T) {
	c := needRedis(t)
	prefix := testPrefix(t, c)
	const producers, consumers, perProducer = 3, 2, 400
	var ps, cs []*Store[int]
	for range producers {
		ps = append(ps, openStore(t, c, nil, WithPrefix(prefix)))
	}
	for range consumers {
		cs = append(cs, openStore(t, c, nil, WithPrefix(prefix)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var mu sync.Mutex
	added := map[int64]string{} // ID -> key ("" for none)
	keyed := make(chan string, producers*perProducer)
	ran := map[int64]int{}
	cancelled := map[int64]bool{}
	settled := make(chan struct{}, producers*perProducer)
	// g runs the workers; the first error fails the test (no module
	// beyond the store's own is needed for an errgroup).
	var g sync.WaitGroup
	errs := make(chan error, producers+consumers+1)
	spawn := func(f func() error) {
		g.Go(func() {
			if err := f(); err != nil {
				errs <- err
			}
		})
	}
	var prod sync.WaitGroup
	for i, s := range ps {
		prod.Add(1)
		spawn(func() error {
			defer prod.Done()
			for n := range perProducer {
				var key string
				if n%5 == 4 {
					key = fmt.Sprintf("p%d-%d", i, n)
				}
				a, err := s.Add(ctx, queue.Job[int]{Payload: i*perProducer + n, Key: key})
				if err != nil {
					return err
				}
				mu.Lock()
				added[a.ID] = key
				mu.Unlock()
				if key != "" {
					keyed <- key
				}
			}
			return nil
		})
	}
	done := make(chan struct{})
	spawn(func() error { // the canceller: about half the keyed jobs
		for {
			select {
			case <-done:
				return nil
			case k := <-keyed:
				if rand.IntN(2) == 0 {
					continue
				}
				s := cs[rand.IntN(len(cs))]
				n, err := s.Cancel(ctx, k)
				if err != nil {
					return err
				}
				if n == 1 {
					mu.Lock()
					for id, key := range added {
						if key == k {
							cancelled[id] = true
						}
					}
					mu.Unlock()
					settled <- struct{}{}
				}
			}
		}
	})
	cctx, stop := context.WithCancel(ctx)
	for _, s := range cs {
		spawn(func() error {
			for {
				j, err := s.Claim(cctx)
				if err != nil {
					if cctx.Err() != nil {
						return nil
					}
					return err
				}
				mu.Lock()
				ran[j.ID]++
				mu.Unlock()
				if err := s.Complete(ctx, j); err != nil {
					return err
				}
				settled <- struct{}{}
			}
		})
	}
	prod.Wait()
	used := false
	for _, s := range ps {
		used = used || s.shards[0].permitKey != ""
	}
	if !used {
		t.Error("no producer was granted inbox permits")
	}
	for range producers * perProducer {
		select {
		case <-settled:
		case <-ctx.Done():
			mu.Lock()
			t.Errorf("timed out: %d run, %d cancelled of %d", len(ran), len(cancelled), len(added))
			mu.Unlock()
		}
		if ctx.Err() != nil {
			break
		}
	}
	close(done)
	stop()
	g.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for id := range added {
		switch {
		case cancelled[id] && ran[id] > 0:
			t.Errorf("job %d cancelled and run", id)
		case !cancelled[id] && ran[id] != 1:
			t.Errorf("job %d run %d times", id, ran[id])
		}
	}
	if len(ran)+len(cancelled) != len(added) {
		t.Errorf("%d run + %d cancelled; %d added", len(ran), len(cancelled), len(added))
	}
	st, err := cs[0].Stats(context.Background())
	if err != nil || st.Ready != 0 || st.Running != 0 || st.Scheduled != 0 {
		t.Fatalf("Stats = %+v, %v; want nothing left", st, err)
	}
}

// TestLoneAdd: an Add is a lone producer's while no other is in progress
// and none was in the last loneSpan Adds.
func TestLoneAdd(t *testing.T) {
	sh := &shard{}
	sh.sharedAt.Store(defaultLoneStart - loneSpan) // as newShard does by default
	add := func() bool {                           // an Add that returns before the next
		defer sh.adding.Add(-1)
		return sh.loneAdd()
	}
	for i := range defaultLoneStart {
		if add() {
			t.Fatalf("Add %d of a new process is lone", i+1)
		}
	}
	if !add() {
		t.Fatal("the 65th Add is not lone")
	}
	if !sh.loneAdd() { // in progress
		t.Fatal("an Add alone is not lone")
	}
	if add() {
		t.Fatal("an Add beside another is lone")
	}
	sh.adding.Add(-1)
	for i := range loneSpan {
		if add() {
			t.Fatalf("Add %d after a shared one is lone", i)
		}
	}
	if !add() {
		t.Fatalf("an Add %d Adds after the last shared one is not lone", loneSpan+1)
	}
}
