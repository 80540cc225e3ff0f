package redisstore

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/queuekit/queue"
	"github.com/redis/go-redis/v9"
)

// pinClient returns a client of its own (so that its pool's counts are
// the test's) with pool size n.
func pinClient(t *testing.T, n int) *redis.Client {
	t.Helper()
	needRedis(t)
	c := redis.NewClient(&redis.Options{Addr: redisAddr(), PoolSize: n})
	t.Cleanup(func() { c.Close() })
	return c
}

// addLone adds n plain jobs one after another (a lone producer's).
func addLone(t *testing.T, s *Store[int], n int) {
	t.Helper()
	for i := range n {
		if _, err := s.Add(context.Background(), queue.Job[int]{Payload: i}); err != nil {
			t.Fatalf("Add %d: %v", i, err)
		}
	}
}

// pinnedConn returns the shard's pinned connection, nil for none.
func pinnedConn(sh *shard) *redis.Conn {
	sh.pin.mu.Lock()
	defer sh.pin.mu.Unlock()
	return sh.pin.conn
}

// TestLonePushesShareOneConnection: a lone producer's pushes to the
// inbox go through one connection taken from the pool and kept, instead
// of one (checked by go-redis with a system call) a push; Close gives it
// back.
func TestLonePushesShareOneConnection(t *testing.T) {
	// No release for idleness: on a loaded machine two pushes may be
	// pinIdle apart, and the release's timer may hold the pin as a push
	// comes (it then takes the pool).
	defer func(d time.Duration) { pinIdle = d }(pinIdle)
	pinIdle = time.Hour
	c := pinClient(t, 10)
	prefix := testPrefix(t, c)
	s, err := New[int](c, idleOpts(prefix)...)
	if err != nil {
		t.Fatal(err)
	}
	// Not openStoreCfg: this test closes the store itself.
	startStore(t, s, nil, nil)
	sh := s.shards[0]
	addLone(t, s, 10) // the grant, and the pin
	if pinnedConn(sh) == nil {
		t.Fatal("no connection pinned after 10 lone Adds")
	}
	const n = 300
	addLone(t, s, n)
	sh.pin.mu.Lock()
	made, onPool := sh.pin.made, sh.pin.onPool
	sh.pin.mu.Unlock()
	if made != 1 || onPool != 0 {
		t.Fatalf("%d lone Adds after the first 10: %d connections pinned in all, %d pushes through the pool; want 1 and 0", n, made, onPool)
	}
	if st, err := s.Stats(context.Background()); err != nil || st.Ready != n+10 {
		t.Fatalf("Stats = %+v, %v; want %d ready", st, err, n+10)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if pinnedConn(sh) != nil {
		t.Fatal("a connection is still pinned after Close")
	}
	if ps := c.PoolStats(); ps.IdleConns != ps.TotalConns {
		t.Fatalf("after Close the pool has %d connections, %d idle; want all back", ps.TotalConns, ps.IdleConns)
	}
	// An Add after Close (refused or not) pins nothing.
	_, _ = s.Add(context.Background(), queue.Job[int]{Payload: -1})
	if pinnedConn(sh) != nil {
		t.Fatal("an Add after Close pinned a connection")
	}
}

// TestPinReleasedWhenIdle: the pinned connection goes back to the pool
// pinIdle after the last push, and is kept while pushes come sooner.
func TestPinReleasedWhenIdle(t *testing.T) {
	c := pinClient(t, 10)
	prefix := testPrefix(t, c)
	s := openStore(t, c, nil, idleOpts(prefix)...)
	sh := s.shards[0]
	addLone(t, s, 10)
	held := pinnedConn(sh)
	if held == nil {
		t.Fatal("no connection pinned")
	}
	// The timer's call (releaseIdlePin), made by the test at a time it
	// chooses: a push came less than pinIdle ago, so it keeps the pin.
	sh.pin.mu.Lock()
	sh.pin.used = time.Now()
	sh.pin.mu.Unlock()
	sh.releaseIdlePin()
	if pinnedConn(sh) != held {
		t.Fatal("the pin was released though a push used it just now")
	}
	sh.pin.mu.Lock()
	sh.pin.used = time.Now().Add(-pinIdle)
	sh.pin.mu.Unlock()
	sh.releaseIdlePin()
	if pinnedConn(sh) != nil {
		t.Fatal("the pin was kept pinIdle after its last push")
	}
	if ps := c.PoolStats(); ps.IdleConns == 0 {
		t.Fatalf("pool stats %+v: the released connection is not idle in the pool", ps)
	}
	// The next lone push pins a connection again.
	addLone(t, s, 1)
	if pinnedConn(sh) == nil {
		t.Fatal("no connection pinned after the pin was released")
	}
	if st, err := s.Stats(context.Background()); err != nil || st.Ready != 11 {
		t.Fatalf("Stats = %+v, %v; want 11 ready", st, err)
	}
}

// TestPinnedConnectionKilled: when Redis closes the pinned connection,
// the next push goes through the pool: the Add succeeds, the store is not
// marked down, and the job is stored once.
func TestPinnedConnectionKilled(t *testing.T) {
	c := pinClient(t, 10)
	prefix := testPrefix(t, c)
	s := openStore(t, c, nil, idleOpts(prefix)...)
	sh := s.shards[0]
	ctx := context.Background()
	addLone(t, s, 10)
	pc := pinnedConn(sh)
	if pc == nil {
		t.Fatal("no connection pinned")
	}
	id, err := pc.ClientID(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if n, err := c.ClientKillByFilter(ctx, "ID", strconv.FormatInt(id, 10)).Result(); err != nil || n != 1 {
		t.Fatalf("CLIENT KILL ID %d = %d, %v", id, n, err)
	}
	p0 := sh.permits
	if _, err := s.Add(ctx, queue.Job[int]{Payload: 10}); err != nil {
		t.Fatalf("Add after the pinned connection was killed: %v", err)
	}
	if sh.permits != p0-1 {
		t.Fatal("the Add did not go to the inbox")
	}
	if !sh.healthy.Load() {
		t.Fatal("the shard was marked down")
	}
	addLone(t, s, 1)
	if pc2 := pinnedConn(sh); pc2 == nil || pc2 == pc {
		t.Fatal("no new connection pinned after the old one was killed")
	}
	if st, err := s.Stats(ctx); err != nil || st.Ready != 12 {
		t.Fatalf("Stats = %+v, %v; want 12 ready", st, err)
	}
	samePayloads(t, "after the kill", claimOrder(t, s, 12), []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 0})
}

// TestPinnable: only a plain client with room in its pool pins.
func TestPinnable(t *testing.T) {
	if pinnable(redis.NewClient(&redis.Options{Addr: redisAddr(), PoolSize: pinMinPool - 1})) != nil {
		t.Errorf("a client with a pool of %d pins", pinMinPool-1)
	}
	if pinnable(redis.NewClient(&redis.Options{Addr: redisAddr()})) == nil {
		t.Error("a client with the default pool does not pin")
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{redisAddr()}})
	defer cc.Close()
	if pinnable(cc) != nil {
		t.Error("a cluster client pins")
	}
	// A store on a small pool pushes through it.
	c := pinClient(t, pinMinPool-1)
	s := openStore(t, c, nil, idleOpts(testPrefix(t, c))...)
	addLone(t, s, 20)
	if pinnedConn(s.shards[0]) != nil {
		t.Fatal("a store on a small pool pinned a connection")
	}
	if st, err := s.Stats(context.Background()); err != nil || st.Ready != 20 {
		t.Fatalf("Stats = %+v, %v; want 20 ready", st, err)
	}
}
