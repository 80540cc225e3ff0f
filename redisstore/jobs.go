package redisstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"github.com/queuekit/queue"
)

// promoteBatch bounds the due jobs one script call promotes.
const promoteBatch = 100

// meta is the Go view of a job's meta record (see luaHeader).
type meta struct {
	Key      string  `json:"k"`
	Group    string  `json:"g"`
	Target   string  `json:"t"`
	Priority string  `json:"p"`
	RunAt    float64 `json:"r"`
	Attempt  int     `json:"a"`
	Max      int     `json:"m"`
	State    string  `json:"s"`
	Err      string  `json:"e"`
	Created  float64 `json:"c"`  // enqueued at, ms
	Claimed  float64 `json:"u"`  // claimed at, ms (running)
	DeadAt   float64 `json:"d"`  // dead at, ms
	Cancel   int     `json:"x"`  // 1: an operator asked to cancel it while it runs
	Meta     string  `json:"md"` // the job's queue.Meta as JSON (MarshalJSON); absent when it has none
}

// jobMeta returns the job's metadata from its record's md field: empty
// when the field is absent (a job without metadata, or one written by a
// version before Meta).
func jobMeta(md string) (queue.Meta, error) {
	var m queue.Meta
	if md == "" {
		return m, nil
	}
	if err := m.UnmarshalJSON([]byte(md)); err != nil {
		return queue.Meta{}, fmt.Errorf("its metadata %.100q does not decode: %w", md, err)
	}
	return m, nil
}

func parseMeta(raw any) (meta, bool) {
	var m meta
	s, ok := raw.(string)
	if !ok {
		return m, false
	}
	if utf8.ValidString(s) {
		return m, json.Unmarshal([]byte(s), &m) == nil
	}
	// A key, group or error text that is not UTF-8 is written as it is
	// (appendJSONString), and encoding/json would read each stray byte
	// as U+FFFD: carry the bytes through the decoder as runes and back.
	if json.Unmarshal([]byte(shieldBytes(s)), &m) != nil {
		return m, false
	}
	for _, f := range []*string{&m.Key, &m.Group, &m.Target, &m.Priority, &m.Err, &m.Meta} {
		*f = unshieldBytes(*f)
	}
	return m, true
}

// shieldMark starts a shielded byte (shieldMark, then shieldBase+the
// byte) or a shielded shieldMark (shieldMark twice): private-use runes,
// and any already in the text are shielded too, so unshieldBytes gives
// back exactly the bytes shieldBytes was given.
const (
	shieldMark = '\uE000'
	shieldBase = 0xE100
)

// shieldBytes returns s, not valid UTF-8, with every byte that is not
// part of a UTF-8 sequence written as two private-use runes.
func shieldBytes(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			b.WriteRune(shieldMark)
			b.WriteRune(rune(shieldBase + int(s[i])))
		case r == shieldMark:
			b.WriteRune(shieldMark)
			b.WriteRune(shieldMark)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// unshieldBytes reverses shieldBytes.
func unshieldBytes(s string) string {
	if !strings.ContainsRune(s, shieldMark) {
		return s
	}
	var b strings.Builder
	rs := []rune(s)
	for i := 0; i < len(rs); i++ {
		if rs[i] != shieldMark || i+1 == len(rs) {
			b.WriteRune(rs[i])
			continue
		}
		i++
		if rs[i] == shieldMark {
			b.WriteRune(shieldMark)
		} else {
			b.WriteByte(byte(rs[i] - shieldBase))
		}
	}
	return b.String()
}

func (s *Store[T]) now() int64 { return ms(s.cfg.Clock.Now()) }

// Cancel cancels the queued or scheduled job with key and the coalesced
// rerun of the key; see storekit.Store. It reports how many jobs it
// cancelled, which is 0 or 1 as in the in-memory store except where a key
// has more than one job here: a job a lease rescue put back with a rerun
// waiting behind it, or jobs with the key on two shards (dedupe holds per
// shard), or in the fallback and in Redis.
func (s *Store[T]) Cancel(ctx context.Context, key string) (int, error) {
	s.fbMu.Lock()
	n := s.fb.cancel(key)
	s.fbReady.Store(int64(s.fb.readyLen()))
	s.fbMu.Unlock()
	for _, sh := range s.shards {
		if !sh.healthy.Load() {
			continue
		}
		res, err := sh.run(ctx, sh.client, scriptCancel, nil, key, "all").Slice()
		if err != nil {
			if isOutage(ctx, err) {
				s.markDown(sh, err)
			}
			return n, err
		}
		n += int(replyInt(res[0]))
		sh.ready.Store(replyInt(res[1]))
	}
	return n, nil
}

// CancelMatch cancels every queued, scheduled or rerun job whose key
// satisfies match; see storekit.Store. It walks the pending keys with HSCAN,
// a page at a time, and cancels each match with its own script call.
func (s *Store[T]) CancelMatch(ctx context.Context, match func(key string) bool) (int, error) {
	n := 0
	s.fbMu.Lock()
	n += s.fb.cancelMatch(match)
	s.fbReady.Store(int64(s.fb.readyLen()))
	s.fbMu.Unlock()
	for _, sh := range s.shards {
		if !sh.healthy.Load() {
			continue
		}
		c, err := s.cancelMatchShard(ctx, sh, match)
		n += c
		if err != nil {
			if isOutage(ctx, err) {
				s.markDown(sh, err)
			}
			return n, err
		}
	}
	return n, nil
}

func (s *Store[T]) cancelMatchShard(ctx context.Context, sh *shard, match func(string) bool) (int, error) {
	seen := map[string]bool{}
	var keys []string
	for _, h := range []string{sh.ks.fixed[kKeys], sh.ks.fixed[kReruns]} {
		var cursor uint64
		for {
			page, next, err := sh.client.HScan(ctx, h, cursor, "", 500).Result()
			if err != nil {
				return 0, err
			}
			for i := 0; i+1 < len(page); i += 2 {
				if k := page[i]; !seen[k] && match(k) {
					seen[k] = true
					keys = append(keys, k)
				}
			}
			if cursor = next; cursor == 0 {
				break
			}
		}
	}
	n := 0
	for len(keys) > 0 {
		batch := keys[:min(len(keys), 200)]
		keys = keys[len(batch):]
		pipe := sh.client.Pipeline()
		cmds := make([]*redis.Cmd, len(batch))
		for i, k := range batch {
			cmds[i] = sh.run(ctx, pipe, scriptCancel, nil, k, "all")
		}
		// Each call's error is its own: one that found the script
		// missing, or drain keys it was not given (nothing written),
		// runs again alone; shard.run learns the keys.
		_, _ = pipe.Exec(ctx)
		for i, cmd := range cmds {
			res, err := cmd.Slice()
			if isNoScript(err) || sh.learnDrainKeys(err) {
				res, err = sh.run(ctx, sh.client, scriptCancel, nil, batch[i], "all").Slice()
			}
			if err != nil {
				return n, err
			}
			n += int(replyInt(res[0]))
			sh.ready.Store(replyInt(res[1]))
		}
	}
	return n, nil
}

func isNoScript(err error) bool { return redis.HasErrorPrefix(err, "NOSCRIPT") }

// PromoteDue moves due scheduled jobs to the ready lists, a bounded batch
// per script call; see storekit.Store. Claim and the leader's janitor run it
// by themselves.
func (s *Store[T]) PromoteDue(ctx context.Context) (int, error) {
	now := s.now()
	n := 0
	s.fbMu.Lock()
	n = s.fb.promote()
	s.fbReady.Store(int64(s.fb.readyLen()))
	evs := s.fb.takeEvents()
	s.fbMu.Unlock()
	s.reportFallback(evs, now)
	for _, sh := range s.shards {
		if !sh.healthy.Load() {
			continue
		}
		moved, err := s.promoteShard(ctx, sh, now)
		n += moved
		if err != nil {
			return n, err
		}
	}
	if n > 0 {
		s.signal()
	}
	return n, nil
}

// promoteShard moves sh's jobs due by now (ms) to their ready lists, a
// bounded batch per script call, reports the jobs it could not requeue
// for capacity, and records sh's next due time (see learnDue).
func (s *Store[T]) promoteShard(ctx context.Context, sh *shard, now int64) (int, error) {
	n := 0
	for {
		res, err := sh.run(ctx, sh.client, scriptPromote, nil, now, promoteBatch,
			s.cfg.Capacity, s.cfg.RequeueDelay.Milliseconds()).Slice()
		if err != nil {
			if isOutage(ctx, err) {
				s.markDown(sh, err)
			}
			return n, err
		}
		moved := int(replyInt(res[0]))
		rq := replySlice(res[1])
		s.reportRequeued(rq, now)
		sh.ready.Store(replyInt(res[2]))
		n += moved
		if moved+len(rq)/5 < promoteBatch {
			s.learnDue(sh, dueReply(res[3]))
			return n, nil
		}
	}
}

// Purge removes every ready and scheduled job and every rerun, a bounded
// batch per script call; see storekit.Store.
func (s *Store[T]) Purge(ctx context.Context) (int, error) {
	s.fbMu.Lock()
	n := s.fb.purge() // the jobs whose Add may have reached Redis stay
	s.fbReady.Store(int64(s.fb.readyLen()))
	s.fbMu.Unlock()
	for _, sh := range s.shards {
		if !sh.healthy.Load() {
			continue
		}
		c, err := s.purgeShard(ctx, sh)
		n += c
		if err != nil {
			if isOutage(ctx, err) {
				s.markDown(sh, err)
			}
			return n, err
		}
	}
	return n, nil
}

func (s *Store[T]) purgeShard(ctx context.Context, sh *shard) (int, error) {
	n := 0
	for {
		res, err := sh.run(ctx, sh.client, scriptPurge, nil, 200).Slice()
		if err != nil {
			return n, err
		}
		n += int(replyInt(res[0]))
		sh.ready.Store(replyInt(res[2]))
		if replyInt(res[1]) == 0 {
			break
		}
	}
	var cursor uint64
	for {
		page, next, err := sh.client.HScan(ctx, sh.ks.fixed[kReruns], cursor, "", 500).Result()
		if err != nil {
			return n, err
		}
		for i := 0; i+1 < len(page); i += 2 {
			res, err := sh.run(ctx, sh.client, scriptCancel, nil, page[i], "rerun").Slice()
			if err != nil {
				return n, err
			}
			n += int(replyInt(res[0]))
		}
		if cursor = next; cursor == 0 {
			return n, nil
		}
	}
}
