package redisstore

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/admin"
	"github.com/redis/go-redis/v9"
)

// BenchmarkAdminList pages 100 jobs of a queue holding
// REDISSTORE_BENCH_ADMIN_N jobs (default 1 000 000: 900 000 ready,
// 100 000 dead), as an operator's dashboard or queuectl would: the first
// page newest first, the first oldest first, the first of one priority, a
// page from the middle of the ready jobs, and the newest dead jobs with
// their payloads. The ready jobs are enqueued with EnqueueMany (batches of
// 10 000 from four goroutines, so through the add script and the ready
// index, about half a minute); the dead ones are written by a loader
// script (the dead set and the records, as bury leaves them). The set is
// loaded once per run and deleted at the end.
//
//	go test -run '^$' -bench AdminList -benchtime 200x ./redisstore
func BenchmarkAdminList(b *testing.B) {
	n := envInt("REDISSTORE_BENCH_ADMIN_N", 1_000_000)
	c := benchClient(b)
	s, err := New[int](c, WithPrefix(testPrefix(b, c)))
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Init(benchConfig()); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	dead := n / 10
	ready := n - dead
	start := time.Now()
	loadJobs(b, ctx, s, ready, dead)
	b.Logf("loaded %d ready and %d dead jobs in %s", ready, dead, time.Since(start).Round(time.Millisecond))
	a := admin.New(s.Admin())
	counts, err := a.Counts(ctx)
	if err != nil || counts[admin.Ready] != ready || counts[admin.Dead] != dead {
		b.Fatalf("counts %v, %v", counts, err)
	}
	// The middle of the ready jobs: the position of the job ranked half
	// way in the ready index, brought up to date first (List does that
	// itself; Counts does not).
	if err := indexReady(ctx, s.shards[0]); err != nil {
		b.Fatal(err)
	}
	mid, err := c.ZRangeWithScores(ctx, s.shards[0].ks.fixed[kReadyIdx], int64(ready/2), int64(ready/2)).Result()
	if err != nil || len(mid) != 1 {
		b.Fatal(mid, err)
	}
	var midID int64
	fmt.Sscan(mid[0].Member.(string), &midID)
	half := admin.Cursor{At: time.UnixMilli(int64(mid[0].Score)), ID: midID}
	for _, c := range []struct {
		name string
		q    admin.Query
	}{
		{name: "ready-newest", q: admin.Query{Filter: admin.Filter{State: admin.Ready}}},
		{name: "ready-oldest", q: admin.Query{Filter: admin.Filter{State: admin.Ready}, Oldest: true}},
		{name: "ready-high-newest", q: admin.Query{Filter: admin.Filter{State: admin.Ready, Priority: "high"}}},
		{name: "ready-target-newest", q: admin.Query{Filter: admin.Filter{State: admin.Ready, Target: "t3"}}},
		{name: "dead-newest", q: admin.Query{Filter: admin.Filter{State: admin.Dead}, Payload: true}},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				p, err := a.List(ctx, c.q)
				if err != nil {
					b.Fatal(err)
				}
				if len(p.Jobs) != admin.DefaultLimit || p.Next == "" {
					b.Fatalf("got %d jobs, next %q", len(p.Jobs), p.Next)
				}
			}
		})
	}
	// Filters that match nothing: each call examines admin.MaxExamined
	// jobs and returns an empty partial page with a cursor.
	for _, c := range []struct {
		name string
		f    admin.Filter
	}{
		{name: "ready-rare-target-newest", f: admin.Filter{State: admin.Ready, Target: "rare"}},
		{name: "ready-no-key-prefix-oldest", f: admin.Filter{State: admin.Ready, KeyPrefix: "nothing/"}},
	} {
		b.Run(c.name, func(b *testing.B) {
			q := admin.Query{Filter: c.f, Oldest: c.name == "ready-no-key-prefix-oldest"}
			for b.Loop() {
				p, err := a.List(ctx, q)
				if err != nil {
					b.Fatal(err)
				}
				if len(p.Jobs) != 0 || !p.Partial || p.Next == "" || p.Examined != admin.MaxExamined {
					b.Fatalf("got %d jobs, partial %v, examined %d, next %q", len(p.Jobs), p.Partial, p.Examined, p.Next)
				}
			}
		})
	}
	b.Run("ready-middle", func(b *testing.B) {
		for b.Loop() {
			jobs, err := s.Admin().List(ctx, admin.Filter{State: admin.Ready}, true, &half, admin.DefaultLimit, false)
			if err != nil {
				b.Fatal(err)
			}
			if len(jobs) != admin.DefaultLimit {
				b.Fatalf("got %d jobs", len(jobs))
			}
		}
	})
}

// loadJobs enqueues ready jobs with EnqueueMany (batches of 10 000 from
// four goroutines, through the add script and the ready index: high,
// normal and low in turn, targets t0 to t6) and writes dead ones as bury
// leaves them.
func loadJobs(b *testing.B, ctx context.Context, s *Store[int], ready, dead int) {
	loadDead(b, ctx, s, dead)
	const batch = 10_000
	var wg sync.WaitGroup
	next := make(chan int)
	labels := []string{"high", "normal", "low"}
	for range 4 {
		wg.Go(func() {
			jobs := make([]queue.Job[int], 0, batch)
			for from := range next {
				jobs = jobs[:0]
				for i := from; i < min(from+batch, ready); i++ {
					jobs = append(jobs, queue.Job[int]{Priority: labels[i%3], Target: fmt.Sprint("t", i%7), Payload: i})
				}
				if _, err := s.EnqueueMany(ctx, jobs); err != nil {
					b.Error(err)
				}
			}
		})
	}
	for from := 0; from < ready; from += batch {
		next <- from
	}
	close(next)
	wg.Wait()
}

// loadDead writes n dead jobs as bury leaves them, 2000 per script call.
func loadDead(b *testing.B, ctx context.Context, s *Store[int], n int) {
	sh := s.shards[0]
	load := redis.NewScript(`
local META, DATA, DEAD, IDS = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local n, at = tonumber(ARGV[1]), tonumber(ARGV[2])
local last = redis.call('INCRBY', IDS, n)
local metas, datas, zs = {}, {}, {}
for i = 1, n do
  local id = tostring(last - n + i)
  metas[#metas + 1] = id
  metas[#metas + 1] = '{"k":"dead-' .. id .. '","g":"","t":"","p":"normal","r":' .. at .. ',"a":3,"m":0,"e":"boom","c":' .. at .. ',"s":"d","d":' .. (at + i) .. '}'
  datas[#datas + 1] = id
  datas[#datas + 1] = '{}'
  zs[#zs + 1] = at + i
  zs[#zs + 1] = id
end
redis.call('HSET', META, unpack(metas))
redis.call('HSET', DATA, unpack(datas))
redis.call('ZADD', DEAD, unpack(zs))
return last
`)
	at := time.Now().UnixMilli()
	for done := 0; done < n; done += 2000 {
		k := min(2000, n-done)
		keys := []string{sh.ks.fixed[kMeta], sh.ks.fixed[kData], sh.ks.fixed[kDead], sh.ks.ids()}
		if err := load.Run(ctx, sh.client, keys, k, at+int64(done)).Err(); err != nil {
			b.Fatal(err)
		}
	}
}
