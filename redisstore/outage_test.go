package redisstore

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queuekit/queue"
	"github.com/redis/go-redis/v9"
)

// proxy is a TCP proxy to the test Redis that the test can cut: while cut,
// every connection is closed and new ones are closed on accept, as if Redis
// were unreachable. The shared server itself is never touched.
type proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		ln.Close()
		p.Cut()
		p.wg.Wait()
	})
	return p
}

func (p *proxy) Addr() string { return p.ln.Addr().String() }

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		cut := p.cut
		p.mu.Unlock()
		if cut {
			c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		if p.cut { // cut while dialling: Cut did not see these
			p.mu.Unlock()
			c.Close()
			up.Close()
			continue
		}
		p.conns[c], p.conns[up] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		pipe := func(dst, src net.Conn) {
			defer p.wg.Done()
			_, _ = io.Copy(dst, src)
			dst.Close()
			src.Close()
			p.mu.Lock()
			delete(p.conns, dst)
			delete(p.conns, src)
			p.mu.Unlock()
		}
		go pipe(c, up)
		go pipe(up, c)
	}
}

// Cut closes every connection and refuses new ones until Restore.
func (p *proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		c.Close()
	}
}

// Restore lets connections through again.
func (p *proxy) Restore() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

// proxiedClient returns a client through p with short timeouts, so that an
// outage is noticed in well under a second.
func proxiedClient(t *testing.T, p *proxy) *redis.Client {
	c := redis.NewClient(&redis.Options{
		Addr: p.Addr(), DialTimeout: 200 * time.Millisecond,
		ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond,
		PoolTimeout: 500 * time.Millisecond, MaxRetries: 1,
	})
	t.Cleanup(func() { c.Close() })
	return c
}

// TestOutageFallback cuts the connection to Redis while 10 000 jobs are
// being enqueued and worked through the queue engine: every job runs
// exactly once, the jobs taken during the outage are written back, and the
// store returns to Redis.
func TestOutageFallback(t *testing.T) {
	direct := needRedis(t)
	t.Parallel()
	p := newProxy(t, redisAddr())
	c := proxiedClient(t, p)
	prefix := testPrefix(t, direct)
	s, err := New[int](c, WithPrefix(prefix), WithHealthCheck(100*time.Millisecond, 300*time.Millisecond),
		WithLeaseTTL(3*time.Second), WithFallback(20000), WithPollInterval(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	const total = 10000
	var mu sync.Mutex
	runs := make([]int, total)
	ran := 0
	allRan := make(chan struct{})
	q, err := queue.New(func(ctx context.Context, j queue.Job[int]) error {
		mu.Lock()
		defer mu.Unlock()
		runs[j.Payload]++
		if ran++; ran == total {
			close(allRan)
		}
		return nil
	}, queue.WithStore[int](s), queue.WithWorkers(8, 8), queue.WithCapacity(100000),
		queue.WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := q.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := q.Stop(sctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
		_ = s.Close(sctx)
	}()

	// Four producers pace themselves (at most 4 jobs per ms) so that the
	// outage falls in the middle of the enqueueing; every fifth job is
	// scheduled 1.5 s ahead, so the fallback holds jobs that have not run
	// when Redis returns.
	var next atomic.Int64
	var wg sync.WaitGroup
	var enqErr atomic.Pointer[error]
	for range 4 {
		wg.Go(func() {
			tick := time.NewTicker(time.Millisecond)
			defer tick.Stop()
			for range tick.C {
				n := next.Add(1) - 1
				if n >= total {
					return
				}
				j := queue.Job[int]{Payload: int(n)}
				if n%5 == 0 {
					j.RunAt = time.Now().Add(1500 * time.Millisecond) // some wait in the schedule
				}
				if err := q.Enqueue(ctx, j); err != nil {
					enqErr.Store(&err)
					return
				}
			}
		})
	}
	for next.Load() < total/4 {
		time.Sleep(5 * time.Millisecond) // pacing the scenario, not waiting for the store
	}
	p.Cut()
	cutAt := next.Load()
	time.Sleep(time.Second) // the outage
	st, err := s.Stats(ctx)
	if err != nil {
		t.Fatalf("Stats during the outage: %v", err)
	}
	if st.Healthy || !strings.Contains(st.Detail, "fallback") {
		t.Errorf("Stats during the outage: healthy %v, detail %q; want unhealthy on the fallback", st.Healthy, st.Detail)
	}
	restoreAt := next.Load()
	p.Restore()
	t0 := time.Now()
	wg.Wait()
	t.Logf("producers done %v after restore", time.Since(t0))
	if e := enqErr.Load(); e != nil {
		t.Fatalf("Enqueue: %v", *e)
	}
	t.Logf("outage while jobs %d..%d were enqueued; %s", cutAt, restoreAt, st.Detail)
	select {
	case <-allRan:
	case <-time.After(60 * time.Second):
		mu.Lock()
		t.Fatalf("only %d of %d jobs ran", ran, total)
	}
	t.Logf("all ran %v after restore; %d jobs went to the fallback, %d written back, %d finishes recorded late",
		time.Since(t0), s.nFallback.Load(), s.nWrittenBack.Load(), s.nFlushed.Load())
	mu.Lock()
	for n, c := range runs {
		if c != 1 {
			t.Errorf("job %d ran %d times", n, c)
		}
	}
	mu.Unlock()
	// The fallback drains back to Redis and the store switches back.
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err = s.Stats(ctx)
		if err == nil && st.Healthy && st.Detail == "redis: ok" && st.Ready == 0 && st.Running == 0 && st.Scheduled == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the outage: %+v, %v; want healthy, empty, fallback drained", st, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if ran != total {
		t.Fatalf("%d runs, want %d", ran, total)
	}
}

// TestAddFallbackOff: with the fallback off, Add during an outage returns
// the connection error instead of accepting the job.
func TestAddFallbackOff(t *testing.T) {
	needRedis(t)
	t.Parallel()
	p := newProxy(t, redisAddr())
	c := proxiedClient(t, p)
	s := openStore(t, c, nil, WithPrefix(testPrefix(t, c)), WithFallback(0))
	ctx := context.Background()
	if _, err := s.Add(ctx, queue.Job[int]{Payload: 1}); err != nil {
		t.Fatal(err)
	}
	p.Cut()
	_, err := s.Add(ctx, queue.Job[int]{Payload: 2})
	if err == nil || errors.Is(err, queue.ErrQueueFull) {
		t.Fatalf("Add during an outage without fallback = %v, want the connection error", err)
	}
	p.Restore()
}
