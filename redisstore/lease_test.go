package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/queuetest"
)

// TestLeasesJudgedByRedisClock: three processes of one queue, one with a
// right clock, one ten minutes ahead, one ten minutes behind, each holding
// a job's lease. None rescues a live lease (the ahead one would, if leases
// were judged by each process's clock), and once a lease TTL has passed
// the right process rescues every lease, the ahead process's too (which
// its own clock would keep ten minutes longer).
func TestLeasesJudgedByRedisClock(t *testing.T) {
	c := needRedis(t)
	prefix := testPrefix(t, c)
	ctx := context.Background()
	const ttl = time.Minute
	now := time.Now()
	type proc struct {
		name string
		s    *Store[int]
		job  queue.Job[int]
	}
	rightClk := queuetest.NewFakeClock(now)
	procs := []*proc{{name: "right"}, {name: "ahead"}, {name: "behind"}}
	for i, clk := range []*queuetest.FakeClock{rightClk, queuetest.NewFakeClock(now.Add(10 * time.Minute)),
		queuetest.NewFakeClock(now.Add(-10 * time.Minute))} {
		// The test calls RescueExpired itself: the loops stay out of its way.
		procs[i].s = openStore(t, c, clk, WithPrefix(prefix), WithWorkerID(procs[i].name), WithLeaseTTL(ttl),
			WithJanitorInterval(time.Hour))
	}
	for _, p := range procs {
		if _, err := p.s.Add(ctx, queue.Job[int]{Key: p.name}); err != nil {
			t.Fatal(err)
		}
		p.job = claimWithin(t, p.s, 10*time.Second)
		if p.job.Key != p.name {
			t.Fatalf("%s claimed %q, want its own job", p.name, p.job.Key)
		}
	}
	for _, p := range procs {
		if n, err := p.s.RescueExpired(ctx); err != nil || n != 0 {
			t.Fatalf("%s: RescueExpired = %d, %v; want no live lease rescued", p.name, n, err)
		}
		if lost, err := p.s.Heartbeat(ctx, []int64{p.job.ID}); err != nil || len(lost) != 0 {
			t.Fatalf("%s: Heartbeat = %v, %v; want the lease kept", p.name, lost, err)
		}
	}
	// A TTL and more later, no process heartbeats again.
	rightClk.Advance(2 * ttl)
	if n, err := procs[0].s.RescueExpired(ctx); err != nil || n != len(procs) {
		t.Fatalf("RescueExpired after the TTL = %d, %v; want every lease (%d) rescued", n, err, len(procs))
	}
	for _, p := range procs {
		if lost, err := p.s.Heartbeat(ctx, []int64{p.job.ID}); err != nil || len(lost) != 1 {
			t.Fatalf("%s: Heartbeat of a rescued lease = %v, %v; want it lost", p.name, lost, err)
		}
	}
}
