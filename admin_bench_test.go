package queue_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/admin"
)

// BenchmarkAdminList lists a page of 100 jobs of an in-memory queue
// holding 1 000 000 (loaded once per run): ready jobs, newest and oldest
// first, filtered by a key prefix, and scheduled jobs. Issue #23's
// target is 50 ms a page.
func BenchmarkAdminList(b *testing.B) {
	const n = 1_000_000
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		scheduled bool
		q         admin.Query
	}{
		{"ready/newest", false, admin.Query{Filter: admin.Filter{State: admin.Ready}}},
		{"ready/oldest", false, admin.Query{Filter: admin.Filter{State: admin.Ready}, Oldest: true}},
		{"ready/keyprefix", false, admin.Query{Filter: admin.Filter{State: admin.Ready, KeyPrefix: "k/99"}}},
		{"scheduled/oldest", true, admin.Query{Filter: admin.Filter{State: admin.Scheduled}, Oldest: true}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			q, err := queue.New(func(context.Context, queue.Job[int]) error { return nil }, queue.WithCapacity(n, 2*n))
			if err != nil {
				b.Fatal(err)
			}
			for i := range n {
				job := queue.Job[int]{Payload: i}
				if i%10 == 0 {
					job.Key = fmt.Sprintf("k/%d", i)
				}
				if tc.scheduled {
					err = q.EnqueueIn(ctx, job, time.Hour+time.Duration(i%5000)*time.Second)
				} else {
					err = q.Enqueue(ctx, job)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			a := q.Admin()
			// The second page too: a cursor must not cost more.
			first, err := a.List(ctx, tc.q)
			if err != nil || len(first.Jobs) != 100 {
				b.Fatalf("first page: %d jobs, %v", len(first.Jobs), err)
			}
			next := tc.q
			next.After = first.Next
			b.ResetTimer()
			for b.Loop() {
				p, err := a.List(ctx, next)
				if err != nil || len(p.Jobs) != 100 {
					b.Fatalf("%d jobs, %v", len(p.Jobs), err)
				}
			}
		})
	}
}
