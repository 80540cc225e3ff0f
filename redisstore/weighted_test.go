package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/storekit"
)

// TestPriorityShardingWeighted: with the priorities weighted 6:3:1 and
// "low" on a Redis of its own, claims follow the shares across the two
// shards while every priority has ready jobs.
func TestPriorityShardingWeighted(t *testing.T) {
	c := needRedis(t)
	t.Parallel()
	low := redis.NewClient(&redis.Options{Addr: redisAddr(), DB: 1})
	prefix := testPrefix(t, c)
	t.Cleanup(func() { deleteKeys(low, "{"+prefix+":*"); low.Close() }) // after the store's Close
	s := openStoreCfg(t, c, nil, func(cfg *storekit.Config) {
		cfg.Priorities = []queue.Priority{{Name: "high", Weight: 0, Share: 6}, {Name: "normal", Weight: 5, Share: 3}, {Name: "low", Weight: 10, Share: 1}}
	}, WithPrefix(prefix), WithShard("low", low))
	if len(s.shards) != 2 {
		t.Fatalf("%d shards, want 2", len(s.shards))
	}
	ctx := context.Background()
	add := func(prio string) {
		t.Helper()
		if _, err := s.Add(ctx, queue.Job[int]{Priority: prio}); err != nil {
			t.Fatal(err)
		}
	}
	for range 5 {
		for _, p := range []string{"high", "normal", "low"} {
			add(p)
		}
	}
	got := map[string]int{}
	for range 200 {
		j := claimWithin(t, s, 5*time.Second)
		got[j.Priority]++
		if err := s.Complete(ctx, j); err != nil {
			t.Fatal(err)
		}
		add(j.Priority)
	}
	if got["high"] != 120 || got["normal"] != 60 || got["low"] != 20 {
		t.Fatalf("claims by priority %v, want high:120 normal:60 low:20", got)
	}
}
