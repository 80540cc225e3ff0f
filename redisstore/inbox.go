package redisstore

import (
	"context"
	"strconv"
)

// The inbox: a lone producer's Add of a plain job (no key, no group, due
// now) is one round trip of one plain command instead of a script call,
// on permits granted by the add-one script. The queue has one inbox at a
// time, so that jobs keep the order their Adds returned in across
// processes; its name carries an epoch, made up by the process that
// opened it and never used again (see freshEpoch), so that permits
// granted for an inbox revoked (or lost with Redis's data) never reach
// the next one. See doc.go, "The inbox".

// noInbox is the epoch of no inbox: a key, in the queue's hash tag, that
// the add scripts are given when the process knows of no inbox and that
// never exists.
const noInbox = "-"

// inboxKey returns the key of the inbox of epoch e.
func (k keyspace) inboxKey(e string) string { return k.tag + ":inbox:" + e }

// freshEpoch returns an epoch no inbox has had: the process's random
// token and a count of the epochs it made up. Every add-one call that may
// open an inbox takes one, so that an inbox revoked (or lost with Redis's
// data) is never opened again under its name, even when the reply of the
// call that opened it was lost: permits granted for it cannot reach
// another inbox.
func (sh *shard) freshEpoch() string {
	return sh.token + "." + strconv.FormatInt(sh.epochN.Add(1), 10)
}

// learnInbox records that the current inbox has epoch e ("" for none).
func (sh *shard) learnInbox(e string) {
	if e == "" {
		e = noInbox
	}
	if cur := sh.inbox.Load(); *cur == sh.ks.inboxKey(e) {
		return
	}
	k := sh.ks.inboxKey(e)
	sh.inbox.Store(&k)
}

// leftToAdd reports whether st, the reply of the add-ready or add-one
// script, says that it wrote nothing and left the jobs to the add script
// ('drain' or 'revoke'); it learns the inbox's name the reply carries.
func (sh *shard) leftToAdd(st []string) bool {
	if len(st) == 0 || (st[0] != "drain" && st[0] != "revoke") {
		return false
	}
	if len(st) == 2 {
		sh.learnInbox(st[1])
	}
	return true
}

// loneSpan is how many Adds must pass with none made at the same time
// before Adds take the inbox again.
const loneSpan = 1024

// defaultLoneStart is how many Adds a process makes before its first
// lone one: producers started together find each other first.
const defaultLoneStart = 64

// loneStart is defaultLoneStart but in the package's tests, which set it
// to 0 (TestMain) to use the inbox from a store's first Add; its
// benchmarks set it back (benchDefaults).
var loneStart int64 = defaultLoneStart

// loneAdd counts an Add in (the caller takes it out of sh.adding when it
// returns) and reports whether it is a lone producer's: no other Add in
// progress now nor in the last loneSpan Adds. A lone producer's plain Add
// may go to the inbox; Adds made at once share the combiner's script
// calls (one round trip for many), which one command a job would undo,
// and an entry in the inbox sends the combiner's batches to the add
// script, which drains it first. The span keeps producers that take
// turns (each finding the others between two Adds) off the inbox.
func (sh *shard) loneAdd() bool {
	n := sh.adding.Add(1)
	seq := sh.addSeq.Add(1)
	if n > 1 {
		sh.sharedAt.Store(seq)
		return false
	}
	return seq-sh.sharedAt.Load() > loneSpan
}

// addPermits records k permits granted for block blk, on inbox key.
func (sh *shard) addPermits(blk, k int64, key string) {
	sh.idMu.Lock()
	defer sh.idMu.Unlock()
	if sh.permitBlk != blk || sh.permitKey != key {
		sh.permitBlk, sh.permitKey, sh.permits = blk, key, 0
	}
	sh.permits += k
}

// dropPermits forgets the permits on inbox key: it is gone.
func (sh *shard) dropPermits(key string) {
	sh.idMu.Lock()
	defer sh.idMu.Unlock()
	if sh.permitKey == key {
		sh.permits = 0
	}
}

// pushInbox appends it to the inbox key with one RPUSHX; the waker sends
// the wake-up token when the inbox was empty. It reports false, with
// nothing stored, when the inbox is gone (its permits were revoked, or
// Redis lost it).
func (s *Store[T]) pushInbox(ctx context.Context, sh *shard, key string, it *addItem) (bool, error) {
	// id,seq,label length,meta length (8 digits),label,meta record,
	// payload: the label names the ready list (see drain in luaBase).
	n := metaPrefixLen(it) + 3
	e := make([]byte, 0, 48+len(it.label)+n+len(it.enc))
	e = strconv.AppendInt(e, it.id, 10)
	e = append(e, ',')
	e = strconv.AppendInt(e, it.seq, 10)
	e = append(e, ',')
	e = strconv.AppendInt(e, int64(len(it.label)), 10)
	e = append(e, ",00000000,"...)
	at := len(e) - 9
	e = append(e, it.label...)
	m0 := len(e)
	e = append(appendMetaPrefix(e, it), `q"}`...)
	ml := len(e) - m0
	for i := at + 7; ml > 0; i-- {
		e[i] = byte('0' + ml%10)
		ml /= 10
	}
	e = append(e, it.enc...)
	// One plain command: the wake-up of a waiting Claim is off the
	// caller's path. RPUSHX returns the inbox's length, its sentinel
	// included; 2 means the inbox was empty until this push, and a Claim
	// that drained it before may sleep: the waker sends it a token. A
	// push finding entries there needs none: the token sent for the
	// first of them is still due to wake a Claim that drains them all.
	l, err := sh.rpushx(ctx, key, e)
	if err != nil {
		return false, err
	}
	if l == 2 {
		select {
		case sh.wakeReq <- struct{}{}:
		default: // a wake-up is pending already: coalesced
		}
	}
	return l > 0, nil
}

// inboxWaker pushes a wake-up token to sh's wake list for each request a
// push to the inbox made (coalesced: one pending at most). The job is
// durable before the token is sent; a lost token delays its Claim until
// the claimers' poll, never loses the job.
func (s *Store[T]) inboxWaker(sh *shard) {
	defer s.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for {
		select {
		case <-s.closing:
			return
		case <-sh.wakeReq:
		}
		p := sh.client.Pipeline()
		p.RPush(ctx, sh.ks.fixed[kWake], "1")
		p.LTrim(ctx, sh.ks.fixed[kWake], 0, 63)
		if _, err := p.Exec(ctx); err != nil && isOutage(ctx, err) {
			s.markDown(sh, err)
		}
	}
}

// runInbox drains the shard's inbox, and with revoke deletes it,
// returning the permits not used.
func (s *Store[T]) runInbox(ctx context.Context, sh *shard, revoke bool) error {
	mode := "drain"
	if revoke {
		mode = "revoke"
	}
	n, err := sh.run(ctx, sh.client, scriptInbox, nil, mode).Int64()
	if err != nil {
		return err
	}
	sh.ready.Store(n)
	return nil
}
