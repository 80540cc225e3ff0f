package redisstore

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/storekit"
	"github.com/queuekit/queue/storekit/durable"
)

// Add accepts a job; see storekit.Store. A ctx already done refuses the job
// with an error matching ctx.Err(), as pgstore does. The payload is encoded first (an
// error, or one matching queue.ErrPayloadTooLarge, refuses the job). While the job's Redis is
// unreachable the job goes to the in-memory fallback, whose dedupe and
// capacity checks see only the fallback; an Add whose reply was lost goes
// there too and is settled with Redis, by its ID, when Redis answers.
func (s *Store[T]) Add(ctx context.Context, job queue.Job[T]) (storekit.Added, error) {
	if err := ctx.Err(); err != nil {
		return storekit.Added{}, fmt.Errorf("redisstore: add: %w", err)
	}
	pi := s.cfg.PriorityIndex(job.Priority)
	if pi < 0 {
		return storekit.Added{}, s.cfg.UnknownPriority(job.Priority)
	}
	if err := durable.CheckTarget(job.Target); err != nil {
		return storekit.Added{}, err
	}
	if err := durable.CheckMeta(job.Meta); err != nil {
		return storekit.Added{}, err
	}
	if err := durable.CheckUniqueFor(job.UniqueFor, job.Key); err != nil {
		return storekit.Added{}, err
	}
	enc, err := s.o.Encode(job.Payload)
	if err != nil {
		return storekit.Added{}, err
	}
	sh := s.byPrio[pi]
	nowT := s.cfg.Clock.Now()
	now := ms(nowT)
	// fj stays on the stack unless the job goes to the fallback.
	fj := fbJob[T]{job: job, enc: enc, sh: sh, prio: pi, created: s.now()}
	if !job.RunAt.IsZero() {
		fj.due = dueMs(job.RunAt, nowT)
	}
	fj.job.Attempt = 0
	if !sh.healthy.Load() {
		return s.addFallback(fj.clone(), now, nil)
	}
	lone := sh.loneAdd()
	defer sh.adding.Add(-1)
	var status string
	for try := 0; ; try++ {
		id, seq, blk, inbox, want, err := sh.newIDPermit(ctx, lone && plainJob(&fj.job, fj.due, now))
		if err != nil {
			return s.addFailed(ctx, &fj, now, false, err)
		}
		fj.job.ID, fj.seq, fj.blk = id, seq, blk
		if inbox != "" {
			it := s.itemOf(&fj, false)
			ok, err := s.pushInbox(ctx, sh, inbox, &it)
			if err != nil {
				return s.addFailed(ctx, &fj, now, true, err)
			}
			if ok {
				status = "ready"
				break
			}
			// The inbox is gone: the job takes the add script.
			sh.dropPermits(inbox)
		}
		fj.want = want
		status, err = s.addOne(sh, &fj, false)
		if err != nil {
			return s.addFailed(ctx, &fj, now, true, err)
		}
		if status != "stale" {
			break
		}
		// Redis lost the block (it restarted): nothing was stored.
		// Take an ID from a new block.
		sh.dropBlock(blk)
		if try == 2 {
			return storekit.Added{}, fmt.Errorf("redisstore: redis %s keeps losing the job IDs reserved from it", sh.label)
		}
	}
	added := storekit.Added{ID: fj.job.ID}
	switch status {
	case "dup":
		return storekit.Added{}, queue.ErrDuplicate
	case "window":
		return storekit.Added{}, durable.WindowDuplicate(job.Key)
	case "full":
		return storekit.Added{}, queue.ErrQueueFull
	case "sched":
		added.Scheduled = true
		s.noteDue(sh, fj.due)
	case "rerun":
		added.Coalesced = true
	case "seen":
		added.Scheduled = fj.due > now
	}
	if status == "ready" || status == "rerun" {
		s.signal()
	}
	return added, nil
}

// addFailed ends an Add whose write to Redis failed with err. An outage
// marks the shard down and hands a copy of fj to the fallback; sent says
// the write may have reached Redis (its reply was lost), so the fallback
// holds the job for writing back, unchecked, and Redis decides about it
// when it answers again. Any other error is the caller's.
func (s *Store[T]) addFailed(ctx context.Context, fj *fbJob[T], now int64, sent bool, err error) (storekit.Added, error) {
	if !isOutage(ctx, err) {
		return storekit.Added{}, err
	}
	s.markDown(fj.sh, err)
	c := fj.clone()
	c.inRedis = sent
	return s.addFallback(c, now, err)
}

// plainJob reports whether j (due at due, ms) may go to an inbox.
func plainJob[T any](j *queue.Job[T], due, now int64) bool {
	return j.Key == "" && j.Group == "" && due <= now
}

// clone returns a copy of fj on the heap.
func (fj *fbJob[T]) clone() *fbJob[T] {
	c := *fj
	return &c
}

// addItem is one job for the add script.
type addItem struct {
	id, seq, blk, due, attempt int64
	key, group, target         string
	label, lastErr             string
	md                         string // the job's Meta as JSON (MarshalJSON), "" when it has none
	max                        int
	window                     int64 // unique window, ms; 0: none
	created                    int64 // enqueue time, ms (the queue's clock)
	enc                        []byte
	restore                    bool
	want                       int64 // inbox permits the add-one script may grant
}

func (s *Store[T]) itemOf(fj *fbJob[T], restore bool) addItem {
	j := &fj.job
	return addItem{id: j.ID, seq: fj.seq, blk: fj.blk, due: fj.due, attempt: int64(j.Attempt), key: j.Key,
		group: j.Group, target: j.Target, label: s.cfg.Priorities[fj.prio].Name, lastErr: fj.lastErr,
		max: j.MaxAttempts, window: windowMs(j.UniqueFor), enc: fj.enc, restore: restore, created: fj.created,
		md: metaJSON(j.Meta), want: fj.want}
}

// metaJSON returns m as the meta record's md field holds it: its JSON
// object text, or "" for no metadata, which leaves the field out (a job
// without metadata costs nothing more).
func metaJSON(m queue.Meta) string {
	if m.IsZero() {
		return ""
	}
	b, err := m.MarshalJSON()
	if err != nil { // not for a Meta that passed Check
		return ""
	}
	return string(b)
}

// windowMs is a unique window in whole milliseconds, rounded up: a window
// is never shorter than asked.
func windowMs(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// addOne adds fj through sh's combiner: concurrent Adds share one script
// call. restore marks a write-back from the fallback.
func (s *Store[T]) addOne(sh *shard, fj *fbJob[T], restore bool) (string, error) {
	return sh.adds.do(s.itemOf(fj, restore), func(items []addItem) ([]string, error) {
		return s.runAdd(context.Background(), sh, items)
	})
}

// runAdd adds items in one script call and returns their statuses. A
// batch of plain jobs (no key, no group, due now, not written back: the
// usual case) goes to the lean add-ready script, any other to the add
// script.
//
// The add-ready and add-one scripts leave to the add script, which drains
// the inbox first and revokes the permits out when they are in the way of
// the capacity, the calls that find the inbox's jobs to go first or
// permits out at the capacity: they reply "drain" or "revoke", having
// written nothing.
func (s *Store[T]) runAdd(ctx context.Context, sh *shard, items []addItem) ([]string, error) {
	now := s.now()
	for i := range items {
		if !sh.plain(&items[i], now) {
			return s.runAddAll(ctx, sh, items, now)
		}
	}
	out, err := s.runAddReady(ctx, sh, items)
	if err == nil && sh.leftToAdd(out) {
		return s.runAddAll(ctx, sh, items, now)
	}
	return out, err
}

// plain reports whether it can go to the add-ready script. A job with a
// key never can: it may be in a unique window.
func (sh *shard) plain(it *addItem, now int64) bool {
	return it.key == "" && it.group == "" && !it.restore && it.due <= now && sh.labelIndex(it.label) >= 0
}

// runAddReady adds plain jobs with scriptAddReady. It builds the command's
// arguments itself, from keys boxed once per shard: a lone job costs the
// argument slice, the meta record and the boxes of its id, offset, meta
// and payload.
func (s *Store[T]) runAddReady(ctx context.Context, sh *shard, items []addItem) ([]string, error) {
	if len(items) == 1 {
		return s.runAddOne(ctx, sh, &items[0])
	}
	return sh.addReply(scriptAddReady.runArgv(ctx, sh.client, s.addReadyArgv(sh, items)))
}

// addReadyArgv returns the command that adds items with scriptAddReady
// (evalsha and its arguments).
func (s *Store[T]) addReadyArgv(sh *shard, items []addItem) []any {
	// The lists (label indexes) and seen bitmaps (seq/seenBits) the batch
	// uses, in order of first use; usually one of each.
	var listBuf [4]int
	var seenBuf, blockBuf [2]int64
	lists, seens, blocks := listBuf[:0], seenBuf[:0], blockBuf[:0]
	n := 0
	for i := range items {
		it := &items[i]
		if li := sh.labelIndex(it.label); !slices.Contains(lists, li) {
			lists = append(lists, li)
		}
		if b := it.seq / seenBits; !slices.Contains(seens, b) {
			seens = append(seens, b)
		}
		if b := blockBucket(it.blk); !slices.Contains(blocks, b) {
			blocks = append(blocks, b)
		}
		n += metaPrefixLen(it) + 3
	}
	nkeys := len(sh.readyKeys) + len(lists) + len(seens) + len(blocks) + 2
	argv := make([]any, 0, 3+nkeys+5+len(sh.fields)+len(lists)+addReadyArgs*len(items))
	argv = append(argv, "evalsha", scriptAddReady.hash, nkeys)
	argv = append(argv, sh.readyKeys...)
	for _, li := range lists {
		argv = append(argv, sh.listKeys[li])
	}
	for _, b := range seens {
		argv = append(argv, sh.seenKeyArg(b))
	}
	for _, b := range blocks {
		argv = append(argv, sh.ks.blocks(b*blocksPerKey*idBlock))
	}
	argv = append(argv, sh.ks.fixed[kInboxes], *sh.inbox.Load())
	argv = append(argv, s.capArg, len(lists), len(sh.fields), len(seens), sh.token)
	argv = append(argv, sh.fields...)
	for _, li := range lists {
		argv = append(argv, sh.fields[li])
	}
	// The records share one buffer, sliced once it is complete.
	buf := make([]byte, 0, n)
	var endBuf [8]int
	ends := endBuf[:0]
	for i := range items {
		buf = append(appendMetaPrefix(buf, &items[i]), `q"}`...)
		ends = append(ends, len(buf))
	}
	start := 0
	for i := range items {
		it := &items[i]
		list := slices.Index(lists, sh.labelIndex(it.label)) + 1
		seen := slices.Index(seens, it.seq/seenBits) + 1
		block := slices.Index(blocks, blockBucket(it.blk)) + 1
		argv = append(argv, it.id, list, seen, it.seq%seenBits, buf[start:ends[i]:ends[i]], it.enc, block, it.blk, it.created)
		start = ends[i]
	}
	return argv
}

// runAddOne adds one plain job with scriptAddOne.
func (s *Store[T]) runAddOne(ctx context.Context, sh *shard, it *addItem) ([]string, error) {
	li := sh.labelIndex(it.label)
	bucket := it.seq / seenBits
	meta := append(appendMetaPrefix(make([]byte, 0, metaPrefixLen(it)+3), it), `q"}`...)
	for try := 0; ; try++ {
		// A fresh epoch for every call that may open an inbox: a call
		// whose reply was lost may have opened one, and a name used
		// once is never used again (see inbox.go).
		epoch := noInbox
		if it.want > 0 {
			epoch = sh.freshEpoch()
		}
		argv := make([]any, 0, 3+9+13+len(sh.fields))
		argv = append(argv, "evalsha", scriptAddOne.hash, 9)
		argv = append(argv, sh.readyKeys[:4]...) // not the ready index
		argv = append(argv, sh.listKeys[li], sh.seenKeyArg(bucket), sh.ks.fixed[kInboxes], *sh.inbox.Load(),
			sh.ks.inboxKey(epoch))
		argv = append(argv, s.capArg, sh.fields[li], it.id, it.seq%seenBits, meta, it.enc, regOffset(bucket, it.blk), sh.tokenN,
			it.want, epoch, it.seq, it.label, "res")
		argv = append(argv, sh.fields...)
		res, err := scriptAddOne.runArgv(ctx, sh.client, argv).Slice()
		if err != nil {
			return nil, err
		}
		sh.ready.Store(replyInt(res[0]))
		status := replyString(res[1])
		if len(res) > 3 {
			e := replyString(res[3])
			sh.learnInbox(e)
			if k := replyInt(res[2]); k > 0 && status == "ready" {
				sh.addPermits(it.blk, k, sh.ks.inboxKey(e))
			}
		}
		if status == "inbox" && try < 3 {
			continue // the inbox is another than this process believed
		}
		if status == "inbox" {
			status = "drain" // the add script finds it itself
		}
		return []string{status}, nil
	}
}

// runAddAll adds any jobs with scriptAdd.
// A call that needs drain keys it was not given learns them and calls
// again (see shard.run).
func (s *Store[T]) runAddAll(ctx context.Context, sh *shard, items []addItem, now int64) ([]string, error) {
	for try := 0; ; try++ {
		cmd := scriptAdd.runArgv(ctx, sh.client, s.addAllArgv(sh, items, now, s.cfg.Coalesce))
		if try == 3 || !sh.learnDrainKeys(cmd.Err()) {
			return sh.addReply(cmd)
		}
	}
}

// addAllArgv returns the command that adds items with scriptAdd (evalsha
// and its arguments); coalesce says whether a job whose key runs becomes
// its rerun.
func (s *Store[T]) addAllArgv(sh *shard, items []addItem, now int64, coalesce bool) []any {
	keys := make([]string, len(sh.ks.fixed), len(sh.ks.fixed)+2)
	copy(keys, sh.ks.fixed)
	// The seen bitmaps, then the block registration hashes, go after the
	// fixed keys; usually one of each.
	var seenKeys, blockKeys []string
	for i := range items {
		key, _ := sh.ks.seen(items[i].seq)
		if !slices.Contains(seenKeys, key) {
			seenKeys = append(seenKeys, key)
		}
		if bk := sh.ks.blocks(items[i].blk); !slices.Contains(blockKeys, bk) {
			blockKeys = append(blockKeys, bk)
		}
	}
	dk := *sh.drainKeys.Load()
	keys = append(append(append(keys, seenKeys...), blockKeys...), dk...)
	args := make([]any, 0, 3+len(keys)+len(sh.args)+5+addArgs*len(items))
	args = append(args, "evalsha", scriptAdd.hash, len(keys))
	for _, k := range keys {
		args = append(args, k)
	}
	args = append(args, sh.args...)
	args = append(args, now, s.cfg.Capacity, boolArg(coalesce), len(seenKeys), sh.token, s.leaseShift())
	// The meta prefixes share one buffer, sliced once it is complete.
	n := 0
	for i := range items {
		n += metaPrefixLen(&items[i])
	}
	buf := make([]byte, 0, n)
	ends := make([]int, len(items))
	for i := range items {
		buf = appendMetaPrefix(buf, &items[i])
		ends[i] = len(buf)
	}
	start := 0
	for i := range items {
		it := &items[i]
		key, off := sh.ks.seen(it.seq)
		idx := slices.Index(seenKeys, key) + 1
		bidx := slices.Index(blockKeys, sh.ks.blocks(it.blk)) + 1
		args = append(args, it.id, it.key, it.group, it.label, it.due, boolArg(it.restore), idx, off,
			buf[start:ends[i]:ends[i]], it.enc, bidx, it.blk, it.window, it.created)
		start = ends[i]
	}
	return args
}

// addReply reads an add script's reply: the ready count, then a status
// per job.
func (sh *shard) addReply(cmd *redis.Cmd) ([]string, error) {
	res, err := cmd.Slice()
	if err != nil {
		return nil, err
	}
	sh.ready.Store(replyInt(res[0]))
	out := make([]string, 0, len(res)-1)
	for _, v := range res[1:] {
		out = append(out, replyString(v))
	}
	return out, nil
}

// addReadyArgs is the number of add-ready script arguments per job.
const addReadyArgs = 9

// addArgs is the number of add script arguments per job.
const addArgs = 14

// blockBucket is the index of the registration hash of block blk.
func blockBucket(blk int64) int64 { return blk / (blocksPerKey * idBlock) }

// appendMetaPrefix appends it's meta record (see luaHeader) up to the
// value of s: the add script appends the state and closes the object.
// Strings are escaped as cjson reads them back byte for byte: only quote,
// backslash and control characters are escaped, and other bytes, valid
// UTF-8 or not, are kept as they are (cjson.encode, which wrote the
// records before, does the same), so a key read back from a record still
// matches its pending-key entry.
func appendMetaPrefix(b []byte, it *addItem) []byte {
	b = append(b, `{"k":`...)
	b = appendJSONString(b, it.key)
	b = append(b, `,"g":`...)
	b = appendJSONString(b, it.group)
	b = append(b, `,"t":`...)
	b = appendJSONString(b, it.target)
	b = append(b, `,"p":`...)
	b = appendJSONString(b, it.label)
	b = append(b, `,"r":`...)
	b = strconv.AppendInt(b, it.due, 10)
	b = append(b, `,"a":`...)
	b = strconv.AppendInt(b, it.attempt, 10)
	b = append(b, `,"m":`...)
	b = strconv.AppendInt(b, int64(it.max), 10)
	b = append(b, `,"e":`...)
	b = appendJSONString(b, it.lastErr)
	b = append(b, `,"c":`...)
	b = strconv.AppendInt(b, it.created, 10)
	if it.md != "" {
		b = append(b, `,"md":`...)
		b = appendJSONString(b, it.md)
	}
	return append(b, `,"s":"`...)
}

// metaPrefixLen estimates appendMetaPrefix's length.
func metaPrefixLen(it *addItem) int {
	n := 132 + len(it.key) + len(it.group) + len(it.target) + len(it.label) + len(it.lastErr)
	if it.md != "" {
		n += 8 + len(it.md) + len(it.md)/4 // the quotes of its JSON, escaped
	}
	return n
}

const hexDigits = "0123456789abcdef"

func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c != 0x7f {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		case '\t':
			b = append(b, '\\', 't')
		case '\r':
			b = append(b, '\\', 'r')
		default:
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

func boolArg(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// addFallback puts fj into the fallback, giving it an ID if it has none.
func (s *Store[T]) addFallback(fj *fbJob[T], now int64, cause error) (storekit.Added, error) {
	if s.o.fallbackSize == 0 {
		if cause == nil {
			cause = fmt.Errorf("redis %s unreachable (%s)", fj.sh.label, fj.sh.lastError())
		}
		return storekit.Added{}, fmt.Errorf("redisstore: %w", cause)
	}
	if fj.job.ID == 0 {
		if id, seq, blk, ok := fj.sh.reservedID(); ok {
			fj.job.ID, fj.seq, fj.blk = id, seq, blk
		}
	}
	s.fbMu.Lock()
	defer s.fbMu.Unlock()
	if fj.job.ID == 0 {
		fj.job.ID = s.fb.localID()
	}
	added, err := s.fb.add(fj, now)
	s.fbReady.Store(int64(s.fb.readyLen()))
	if err == nil {
		s.nFallback.Add(1)
	}
	if err == nil && !fj.inRedis {
		s.signal()
	}
	return added, err
}

// reservedID returns an ID from the block already reserved, without Redis.
func (sh *shard) reservedID() (id, seq, blk int64, ok bool) {
	sh.idMu.Lock()
	defer sh.idMu.Unlock()
	if sh.next >= sh.end {
		return 0, 0, 0, false
	}
	seq = sh.next
	sh.next++
	return sh.idOf(seq), seq, sh.end - 1, true
}
