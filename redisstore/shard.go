package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// idBlock is how many job IDs a process reserves from Redis at a time. IDs
// are reserved ahead so that a job has its ID before its Add reaches Redis:
// an Add whose reply is lost can then be settled later by ID.
const idBlock = 256

// shard is one Redis serving one or more priority levels of the queue.
//
// The ID fields are guarded by idMu; everything else is set in Init.
type shard struct {
	index   int    // position in Store.shards
	code    int64  // low bits of this shard's job IDs when sharded
	top     int    // index of the shard's highest priority in the queue's
	label   string // description for logs and Stats, e.g. "high,normal"
	client  redis.UniversalClient
	ks      keyspace
	args    []any // ARGV prefix: label count, default label, labels
	labels  []string
	fields  []any // the ready counters' fields ("r:" + label), like labels
	sharded bool
	// cycle is the weighted dispatch order over the shard's priorities
	// (storekit.ShareCycle, 1-based list indices as the claim script takes
	// them); nil for strict priorities. tick counts the claims made by
	// this process, so the order is per process.
	cycle []byte
	tick  atomic.Uint64

	// Boxed once for the add-ready script: meta, data, count and wake
	// keys; the ready lists' keys, like labels; the last seen bitmap used.
	readyKeys, listKeys []any
	lastSeen            atomic.Pointer[seenArg]

	healthy   atomic.Bool
	hasWaiter chan struct{} // tells the wake listener a Claim waits
	lastErr   atomic.Pointer[string]
	ready     atomic.Int64 // last ready count seen
	due       atomic.Int64 // the next due time learnt, ms; noDue for none (due.go)

	adds    combiner[addItem, string]  // concurrent Adds
	claims  combiner[int64, claimRes]  // concurrent claims, by now (ms)
	settles combiner[settleOp, string] // concurrent Complete, Retry, Defer, Dead

	idMu      sync.Mutex
	next, end int64   // reserved sequence numbers [next, end)
	spare     []int64 // further blocks reserved (their last numbers), in order
	hwm       int64   // the last block reserved (its last number)
	token     string  // registers this process's blocks; see reserve
	tokenN    int64   // token as a registration in the seen bitmaps (regBits wide, never 0)
	// Inbox permits (see inbox.go), with idMu held: the next permits
	// Adds of plain jobs with IDs of block permitBlk may go to the inbox
	// permitKey.
	permits   int64
	permitBlk int64
	permitKey string
	inbox     atomic.Pointer[string]   // the inbox believed current ("" for none)
	epochN    atomic.Int64             // epochs this process made up (freshEpoch)
	adding    atomic.Int64             // Adds in progress (loneAdd)
	addSeq    atomic.Int64             // Adds made
	sharedAt  atomic.Int64             // addSeq of the last Add made beside another
	wakeReq   chan struct{}            // a push found the inbox empty: send a wake-up token
	drainKeys atomic.Pointer[[]string] // the keys a drain reaches by name (see run)
	pin       pin                      // a lone producer's connection (pin.go)
}

func newShard(index int, code int64, client redis.UniversalClient, ks keyspace, labels []string, def string, sharded bool, token string) *shard {
	sh := &shard{index: index, code: code, top: int(code), client: client, ks: ks, labels: labels, sharded: sharded,
		hasWaiter: make(chan struct{}, 1), token: token, tokenN: tokenBits(token)}
	sh.due.Store(noDue)
	sh.args = append(sh.args, len(labels), def)
	for _, l := range labels {
		sh.args = append(sh.args, l)
		sh.fields = append(sh.fields, "r:"+l)
		if sh.label != "" {
			sh.label += ","
		}
		sh.label += l
	}
	sh.readyKeys = []any{ks.fixed[kMeta], ks.fixed[kData], ks.fixed[kCount], ks.fixed[kWake], ks.fixed[kReadyIdx]}
	for i := range labels {
		sh.listKeys = append(sh.listKeys, ks.fixed[nFixedKeys+i])
	}
	none := ks.inboxKey(noInbox)
	sh.inbox.Store(&none)
	sh.sharedAt.Store(loneStart - loneSpan) // lone from Add loneStart+1
	sh.wakeReq = make(chan struct{}, 1)
	sh.drainKeys.Store(&[]string{})
	sh.adds.max = 128
	sh.adds.flights = 4 // see combiner: 1.3× the rate of 1 with 10 producers
	sh.claims.max = 64
	sh.settles.max = 128
	sh.healthy.Store(true)
	sh.pin.client = pinnable(client)
	return sh
}

// seenArg is a seen bitmap's key, boxed, with its index.
type seenArg struct {
	bucket int64
	key    any
}

// seenKeyArg returns the key of the seen bitmap with index bucket, boxed
// for a script's arguments.
func (sh *shard) seenKeyArg(bucket int64) any {
	if a := sh.lastSeen.Load(); a != nil && a.bucket == bucket {
		return a.key
	}
	a := &seenArg{bucket: bucket, key: sh.ks.seenKey(bucket)}
	sh.lastSeen.Store(a)
	return a.key
}

// tokenBits returns token's registration in the seen bitmaps: its first
// regBits bits, with the lowest set, so that a registration never reads
// as the zeros of an unregistered slot.
func tokenBits(token string) int64 {
	var n int64
	for _, c := range []byte(token) {
		var d int64
		switch {
		case c >= '0' && c <= '9':
			d = int64(c - '0')
		case c >= 'a' && c <= 'f':
			d = int64(c-'a') + 10
		default:
			d = int64(c) & 15
		}
		n = (n<<4 | d) & (1<<regBits - 1)
	}
	return n | 1
}

// serves reports whether the shard serves the priority label.
func (sh *shard) serves(label string) bool { return sh.labelIndex(label) >= 0 }

// labelIndex returns the index of label in sh.labels, or -1.
func (sh *shard) labelIndex(label string) int { return slices.Index(sh.labels, label) }

// run calls a job script with the shard's key layout, the drain keys
// last. A script that needs drain keys it was not given (see drain in
// luaBase) fails before any write, naming them; run learns them and calls
// again (not in a pipeline, whose caller sees the error and calls again
// alone).
func (sh *shard) run(ctx context.Context, c redis.Scripter, s script, keys []string, args ...any) *redis.Cmd {
	if keys == nil {
		keys = sh.ks.fixed
	}
	_, piped := c.(redis.Pipeliner)
	for try := 0; ; try++ {
		dk := *sh.drainKeys.Load()
		all := make([]any, 0, len(sh.args)+len(args))
		all = append(all, sh.args...)
		all = append(all, args...)
		cmd := s.Run(ctx, c, append(keys[:len(keys):len(keys)], dk...), all...)
		if piped || try == 3 || !sh.learnDrainKeys(cmd.Err()) {
			return cmd
		}
	}
}

// learnDrainKeys reports whether err is a script's request for drain keys
// (see drain in luaBase), which become the keys the shard's script calls
// declare.
func (sh *shard) learnDrainKeys(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	i := strings.Index(msg, "INBOXKEYS ")
	if i < 0 {
		return false
	}
	msg = msg[i+len("INBOXKEYS "):]
	j := strings.Index(msg, " INBOXEND")
	if j < 0 {
		return false
	}
	var keys []string
	for _, k := range strings.Fields(msg[:j]) {
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	sh.drainKeys.Store(&keys)
	return true
}

// loadScripts loads the scripts so that pipelined EVALSHA calls find them;
// it runs at start and after each outage (Redis may have restarted empty).
func (sh *shard) loadScripts(ctx context.Context) error {
	for _, s := range jobScripts {
		if err := s.Load(ctx, sh.client).Err(); err != nil {
			return err
		}
	}
	for _, s := range []*redis.Script{scriptLeaderRenew, scriptLeaderRelease} {
		if err := s.Load(ctx, sh.client).Err(); err != nil {
			return err
		}
	}
	return nil
}

// newID returns a fresh job ID, its sequence number and the block it
// belongs to (see reserve), reserving a new block from Redis when the
// current one is used up.
func (sh *shard) newID(ctx context.Context) (id, seq, blk int64, err error) {
	sh.idMu.Lock()
	defer sh.idMu.Unlock()
	if err := sh.refill(ctx, 1); err != nil {
		return 0, 0, 0, err
	}
	seq = sh.next
	sh.next++
	return sh.idOf(seq), seq, sh.end - 1, nil
}

// newIDPermit is newID that also takes an inbox permit for the ID when
// plain is set and the process holds one for the ID's block (see
// inbox.go), returning the inbox it is for. want is how many more permits the slow path may ask for: the
// IDs left in the block.
func (sh *shard) newIDPermit(ctx context.Context, plain bool) (id, seq, blk int64, inbox string, want int64, err error) {
	sh.idMu.Lock()
	defer sh.idMu.Unlock()
	if err := sh.refill(ctx, 1); err != nil {
		return 0, 0, 0, "", 0, err
	}
	seq = sh.next
	sh.next++
	blk = sh.end - 1
	if plain && sh.permits > 0 && sh.permitBlk == blk {
		sh.permits--
		return sh.idOf(seq), seq, blk, sh.permitKey, 0, nil
	}
	if plain {
		want = sh.end - sh.next
	}
	return sh.idOf(seq), seq, blk, "", want, nil
}

// refill makes [next, end) non-empty, with sh.idMu held: from a spare
// block, or by reserving blocks for want IDs (one block for one ID).
func (sh *shard) refill(ctx context.Context, want int) error {
	if sh.next < sh.end {
		return nil
	}
	if len(sh.spare) == 0 {
		if err := sh.reserve(ctx, (want+idBlock-1)/idBlock); err != nil {
			return err
		}
	}
	end := sh.spare[0]
	sh.spare = sh.spare[1:]
	sh.next, sh.end = end-idBlock+1, end+1
	return nil
}

// reserve reserves the next k blocks of idBlock sequence numbers each
// (one round trip for the counter, one for the registrations) into
// sh.spare, with sh.idMu held. A block is named by its last number (blk) and is this
// process's only while Redis records it so: the reservation registers it
// under the process's token, and the add scripts refuse, with 'stale', a
// job whose block is not registered to the caller. Redis loses the ID
// counter with everything else when it restarts without persistence (or
// from an older snapshot), and counts again from where it restarted; a
// process still holding a block reserved before would then add jobs under
// IDs that the new counter hands out again, and the add script, which
// takes an ID it has seen for a repeated call, would report a new job with
// such an ID as added when it was not stored at all. The registration
// makes that impossible: a block reserved before the restart is unknown to
// the restarted Redis, or registered to whoever reserved its numbers
// since. The counter is also raised to the last block this process
// reserved before it counts on, so that IDs stay unique across a restart
// as far as this process knows them.
//
// The block is registered after the counter moved past it, never before:
// a snapshot taken in between holds the counter without the registration,
// which only wastes the block. It is registered twice, with the same
// pipeline: in a registration hash (sh.ks.blocks), which the add and
// add-ready scripts read (and processes of earlier versions), and as
// tokenN in the seen bitmaps of its numbers (regOffset), which the
// add-one script reads with the seen bit in one BITFIELD: one command
// fewer on a lone producer's path than an HGET of the hash.
func (sh *shard) reserve(ctx context.Context, k int) error {
	k = max(k, 1)
	last, err := scriptReserve.Run(ctx, sh.client, []string{sh.ks.ids()}, k*idBlock, sh.hwm).Int64()
	if err != nil {
		return err
	}
	sh.hwm = max(sh.hwm, last)
	pipe := sh.client.Pipeline()
	ends := make([]int64, k)
	for i := range ends {
		end := last - int64(k-1-i)*idBlock
		ends[i] = end
		bk := sh.ks.blocks(end)
		pipe.HSet(ctx, bk, strconv.FormatInt(end, 10), sh.token)
		pipe.PExpire(ctx, bk, seenTTL)
		for _, seq := range []int64{end - idBlock + 1, end} {
			// Clearing a bit of the new block creates the bitmap without
			// touching the bits of jobs already added. The registration
			// goes into each bitmap the block reaches too, where the
			// add-one script reads it with the job's seen bit.
			key, off := sh.ks.seen(seq)
			pipe.SetBit(ctx, key, off, 0)
			pipe.BitField(ctx, key, "SET", regType, regOffset(seq/seenBits, end), sh.tokenN)
			pipe.PExpire(ctx, key, seenTTL)
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	sh.spare = ends
	return nil
}

// dropBlock stops handing out IDs of block blk, which an add script found
// not registered to this process (stale): the next newID reserves anew.
func (sh *shard) dropBlock(blk int64) {
	sh.idMu.Lock()
	defer sh.idMu.Unlock()
	if sh.end-1 == blk {
		sh.next = sh.end
		sh.spare = nil // reserved with it: Redis lost them too
	}
}

// dropBlocks stops handing out IDs of every block reserved so far, which
// an add script found not registered to this process (stale): the next
// newID reserves anew.
func (sh *shard) dropBlocks() {
	sh.idMu.Lock()
	defer sh.idMu.Unlock()
	sh.next, sh.spare = sh.end, nil
}

// seenTTL is how long a seen bitmap, and the registration of an ID block,
// outlives the last ID block reserved in its range: the window in which a
// lost Add can still be settled.
const seenTTL = 24 * time.Hour

// idOf turns a sequence number into a job ID: the shard's code sits in the
// low five bits when the queue is sharded (at most 32 priorities), so IDs
// are unique across shards.
func (sh *shard) idOf(seq int64) int64 {
	if sh.sharded {
		return seq<<5 | sh.code
	}
	return seq
}

// seqOf is the inverse of idOf.
func (sh *shard) seqOf(id int64) int64 {
	if sh.sharded {
		return id >> 5
	}
	return id
}

// markDown records an outage; it reports whether the shard was healthy.
func (sh *shard) markDown(err error) bool {
	msg := err.Error()
	sh.lastErr.Store(&msg)
	was := sh.healthy.Swap(false)
	return was
}

// isOutage tells a connection failure (switch to the fallback) from a reply
// error or the caller's cancellation.
func isOutage(ctx context.Context, err error) bool {
	if err == nil || errors.Is(err, redis.Nil) {
		return false
	}
	var re redis.Error
	if errors.As(err, &re) {
		return false
	}
	if ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		return false
	}
	return true
}

// Reply helpers: scripts return flat arrays of strings and integers.

func replyString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case int64:
		return strconv.FormatInt(x, 10)
	case nil:
		return ""
	}
	return fmt.Sprint(v)
}

func replyInt(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case string:
		n, _ := strconv.ParseInt(x, 10, 64)
		return n
	}
	return 0
}

func replySlice(v any) []any {
	s, _ := v.([]any)
	return s
}

func ms(t time.Time) int64 { return t.UnixMilli() }

// dueMs turns a due time into the milliseconds Redis keeps: rounded up
// when t is after now, so that a job never becomes due before its time
// (the store's clock reads are truncated to the millisecond, and a job due
// at .0005 would otherwise be due at .000, up to a millisecond early); a
// time not after now is kept as it is (truncated), so that the job is due
// at once, as the queue's contract says.
func dueMs(t, now time.Time) int64 {
	m := t.UnixMilli()
	if t.After(now) && time.UnixMilli(m).Before(t) {
		m++
	}
	return m
}
