package queue_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/queuetype"
)

// TestMetaTravelsWithTheJob: the handler sees the metadata the producer
// set, at the first run and at a retry; the admin API lists it; Enqueue
// refuses metadata that breaks the rules, naming them.
func TestMetaTravelsWithTheJob(t *testing.T) {
	var mu sync.Mutex
	var seen []queue.Meta
	ran := make(chan struct{}, 4)
	q, err := queue.New(func(ctx context.Context, job queue.Job[int]) error {
		mu.Lock()
		seen = append(seen, job.Meta)
		mu.Unlock()
		ran <- struct{}{}
		if job.Attempt == 1 {
			return queue.RetryAfter(time.Millisecond, errors.New("again"))
		}
		return nil
	}, queue.WithWorkers(1, 1))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var m queue.Meta
	m.Set("tenant", "acme")
	m.Set("request", "r-1")
	if err := q.Enqueue(ctx, queue.Job[int]{Key: "k", Meta: m, Payload: 1}); err != nil {
		t.Fatal(err)
	}
	ji, err := q.Admin().GetKey(ctx, "k", false)
	if err != nil || ji.Meta != m {
		t.Fatalf("admin GetKey: Meta %v, %v; want %v", ji.Meta.Map(), err, m.Map())
	}
	if err := q.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case <-ran:
		case <-time.After(10 * time.Second):
			t.Fatal("the job did not run twice")
		}
	}
	if err := q.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 || seen[0] != m || seen[1] != m {
		t.Fatalf("handler saw %d runs, metadata %v; want 2 runs with %v", len(seen), seen, m.Map())
	}
}

func TestMetaRefused(t *testing.T) {
	q, err := queue.New(func(context.Context, queue.Job[int]) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, c := range []struct {
		pairs map[string]string
		want  string
	}{
		{map[string]string{"": "v"}, "empty key"},
		{map[string]string{"bad\x00key": "v"}, `"bad\x00key"`},
		{map[string]string{"k": "\xff"}, `value of key "k"`},
		{map[string]string{"k": strings.Repeat("v", queuetype.MaxMetaSize)}, "may be at most 4096"},
	} {
		job := queue.Job[int]{Meta: queuetype.MetaOf(c.pairs)}
		err := q.Enqueue(ctx, job)
		if !errors.Is(err, queue.ErrInvalidJob) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Enqueue with Meta %q = %v; want ErrInvalidJob naming %s", c.pairs, err, c.want)
		}
	}
	if n := q.Stats().Enqueued; n != 0 {
		t.Fatalf("%d jobs accepted; want none", n)
	}
}

// A producer tags each job with the tenant it works for; the handler,
// and any middleware, reads it back.
func ExampleMeta() {
	ctx := context.Background()
	q, err := queue.New(func(ctx context.Context, job queue.Job[string]) error {
		fmt.Println(job.Payload, "for", job.Meta.Get("tenant"))
		return nil
	}, queue.WithWorkers(1, 1))
	if err != nil {
		panic(err)
	}
	job := queue.Job[string]{Payload: "invoice 42"}
	job.Meta.Set("tenant", "acme")
	if err := q.Enqueue(ctx, job); err != nil {
		panic(err)
	}
	if err := q.Start(ctx); err != nil {
		panic(err)
	}
	if err := q.Stop(ctx); err != nil {
		panic(err)
	}
	// Output:
	// invoice 42 for acme
}
