package redisstore

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// A lone producer's pushes to the inbox go through a connection of its
// own, taken from the client's pool once and kept while the producer is
// busy (a pin). go-redis takes a connection from its pool for each
// command, and checks each one it takes with a system call of its own
// (a non-blocking recvfrom, whatever the connection's age) and a few
// allocations; a pinned connection skips both: on this machine about 3 %
// of a lone push, and 2–14 % of Queue.Enqueue's rate (docs/benchmarks.md,
// "A lone producer's connection").
//
// The pin is returned to the pool pinIdle after the last push that used
// it, so that a producer that stopped holds nothing, and a connection the
// server closed while it was idle is found by go-redis's own check when
// the next push takes a new one. A push whose pinned connection fails
// for a connection error is sent again through the pool, as go-redis
// itself retries such a command on another connection (a push repeated
// after a lost reply leaves one job: see doc.go, "The inbox").

// pinIdle is how long a pinned connection is kept after its last push
// (a variable for the tests).
var pinIdle = 100 * time.Millisecond

// pinMinPool is the smallest pool size a shard pins a connection of: the
// store's own goroutines (the wake-up listener, the claims, the waker)
// take connections too, and with fewer a pinned one could keep them
// waiting for up to pinIdle.
const pinMinPool = 4

// pin is a shard's lone-producer connection. mu is held for a push on it
// (TryLock: a push that finds it held takes the pool) and to release it.
type pin struct {
	mu     sync.Mutex
	client interface{ Conn() *redis.Conn } // nil: the shard never pins
	conn   *redis.Conn                     // nil when none is pinned
	used   time.Time                       // the last push's start
	timer  *time.Timer                     // releases conn after pinIdle
	closed bool                            // Store.Close ran: pin no more
	// For the tests: connections pinned, and pushes sent through the
	// pool though the shard pins (the pin was busy or closed, or failed).
	made, onPool int
}

// pinnable returns client's Conn method's owner when the shard may pin a
// connection of it: a plain client (not a cluster or a ring, which choose
// the connection by key) with a pool of at least pinMinPool.
func pinnable(client redis.UniversalClient) interface{ Conn() *redis.Conn } {
	c, ok := client.(*redis.Client)
	if !ok || c.Options().PoolSize < pinMinPool {
		return nil
	}
	return c
}

// rpushx runs RPUSHX key e on sh's pinned connection, pinning one when
// none is, or through the pool when the shard does not pin or another
// push holds the pin.
func (sh *shard) rpushx(ctx context.Context, key string, e []byte) (int64, error) {
	p := &sh.pin
	if p.client == nil || !p.mu.TryLock() {
		return sh.client.RPushX(ctx, key, e).Result()
	}
	if p.closed {
		p.onPool++
		p.mu.Unlock()
		return sh.client.RPushX(ctx, key, e).Result()
	}
	if p.conn == nil {
		p.conn = p.client.Conn()
		p.made++
		if p.timer == nil {
			p.timer = time.AfterFunc(pinIdle, sh.releaseIdlePin)
		} else {
			p.timer.Reset(pinIdle)
		}
	}
	p.used = time.Now()
	l, err := p.conn.RPushX(ctx, key, e).Result()
	if err != nil {
		// Return the connection to the pool, which closes it if it is
		// bad (go-redis counts a connection bad after a cancelled or
		// timed-out command too); the next push pins another. Errors
		// are rare: even a reply's (READONLY after a failover, say)
		// gets a fresh connection.
		_ = p.conn.Close()
		p.conn = nil
		outage := isOutage(ctx, err)
		if outage {
			p.onPool++
		}
		p.mu.Unlock()
		if outage {
			// The connection failed: send the push again through the
			// pool, which takes another or dials anew.
			return sh.client.RPushX(ctx, key, e).Result()
		}
		return l, err
	}
	p.mu.Unlock()
	return l, nil
}

// releaseIdlePin returns the pinned connection to the pool when no push
// used it for pinIdle; otherwise it looks again when pinIdle has passed
// since the last push.
func (sh *shard) releaseIdlePin() {
	p := &sh.pin
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn == nil {
		return
	}
	if idle := time.Since(p.used); idle < pinIdle && !p.closed {
		p.timer.Reset(pinIdle - idle)
		return
	}
	_ = p.conn.Close()
	p.conn = nil
}

// unpin returns the pinned connection to the pool for good (Store.Close).
func (sh *shard) unpin() {
	p := &sh.pin
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	if p.timer != nil {
		p.timer.Stop()
	}
	if p.conn != nil {
		_ = p.conn.Close()
		p.conn = nil
	}
}
