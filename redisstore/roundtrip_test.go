package redisstore

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/queuekit/queue"
	"github.com/redis/go-redis/v9"
)

// TestEnqueueOneRoundTrip: one producer's Queue.Enqueue of a ready job is
// exactly one round trip while the reserved ID block lasts: a single
// EVALSHA of the add-one script, or, on an inbox permit that script
// granted, a single RPUSHX to the process's inbox; the block after it
// costs two more round trips (the counter, then the registrations) once
// per idBlock jobs. The queue is not started, so only the Enqueues talk
// to Redis (and no waker sends wake-up tokens).
func TestEnqueueOneRoundTrip(t *testing.T) {
	c := needRedis(t)
	prefix := testPrefix(t, c)
	counted := redis.NewClient(&redis.Options{Addr: redisAddr()})
	t.Cleanup(func() { counted.Close() })
	h := &cmdHook{}
	counted.AddHook(h)
	s, err := New[int](counted, WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	q, err := queue.NewWithStore(s, func(context.Context, queue.Job[int]) error { return nil },
		queue.WithName("rt"), queue.WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_ = q.Stop(sctx)
		_ = s.Close(sctx)
	})
	// The first Enqueue reserves the first block (and may load the
	// script): not counted.
	if err := q.Enqueue(ctx, queue.Job[int]{Payload: 0}); err != nil {
		t.Fatal(err)
	}
	h.reset()
	if err := q.Enqueue(ctx, queue.Job[int]{Payload: 1}); err != nil {
		t.Fatal(err)
	}
	addOne, push := "evalsha "+scriptAddOne.Hash(), "rpushx"
	if trips, cmds := h.get(); trips != 1 || len(cmds) != 1 || cmds[0] != addOne && cmds[0] != push {
		t.Fatalf("one Enqueue: %d round trips, commands %q; want 1, the add-one script or a push to the inbox", trips, cmds)
	}
	// The rest of the first block, and one job of the next.
	h.reset()
	for i := range idBlock - 1 {
		if err := q.Enqueue(ctx, queue.Job[int]{Payload: 2 + i}); err != nil {
			t.Fatal(err)
		}
	}
	trips, cmds := h.get()
	if trips != idBlock+1 {
		t.Fatalf("%d Enqueues took %d round trips; want %d (one each, and two to reserve the next ID block)",
			idBlock-1, trips, idBlock+1)
	}
	if !slices.Contains(cmds, push) {
		t.Fatalf("no Enqueue of a block went to the inbox: %q", cmds)
	}
	if n := q.Stats().Enqueued; n != idBlock+1 {
		t.Fatalf("Stats().Enqueued = %d; want %d", n, idBlock+1)
	}
}

// cmdHook counts round trips (each command or pipeline sent) and records
// the commands sent alone, but for a new connection's handshake.
type cmdHook struct {
	mu    sync.Mutex
	trips int
	cmds  []string
}

func (h *cmdHook) reset() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.trips, h.cmds = 0, nil
}

func (h *cmdHook) get() (int, []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.trips, h.cmds
}

func (*cmdHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *cmdHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() != "hello" {
			name := cmd.Name()
			if args := cmd.Args(); len(args) > 1 && (name == "evalsha" || name == "eval") {
				if sha, ok := args[1].(string); ok && name == "evalsha" {
					name += " " + sha
				}
			}
			h.mu.Lock()
			h.trips++
			h.cmds = append(h.cmds, name)
			h.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}

func (h *cmdHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if cmds[0].Name() != "client" { // a new connection's CLIENT SETINFO
			h.mu.Lock()
			h.trips++
			h.mu.Unlock()
		}
		return next(ctx, cmds)
	}
}
