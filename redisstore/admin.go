package redisstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/admin"
	"github.com/queuekit/queue/storekit/durable"
)

var (
	_ admin.Store   = (*adminStore[int])(nil)
	_ admin.Targets = (*adminStore[int])(nil)

	_ admin.BoundedLister = (*adminStore[int])(nil)
)

// Admin returns the store's admin API backend: pass it to admin.New to
// inspect and act on the queue's jobs (queue.Queue's Admin does). It
// works once the store was passed to queue.New (Init), whether the queue
// runs or not, as queuectl uses it; before that, every method returns
// ErrNotBound.
//
// It sees the jobs in Redis, on every shard (WithShard): not the jobs
// the outage fallback holds in some process's memory. Every action is one
// script on the job's shard, atomic against the claims, outcomes, lease
// rescues and trims of every process; docs/OPERATIONS.md ("Admin API
// guarantees") says what wins each race. Redis keeps no completed or
// cancelled jobs: Done and Cancelled list nothing, and GetKey finds a
// key's pending, running or dead job only.
//
// Its target actions (admin.Targets, what queuectl targets uses) work on
// the fleet's target health in the queue's targets hash on the first
// shard (storekit.TargetStore), which every running queue applies on the
// pub/sub announcement or within its 1 s reload; the last write wins.
// docs/OPERATIONS.md ("Target health and cadence") says what each action
// keeps and what a listing cannot show. (queue.Queue's Admin acts on
// targets through the queue instead.)
func (s *Store[T]) Admin() admin.Store {
	return &adminStore[T]{s: s, Targets: durable.Targets{Load: s.LoadTargets, Save: s.SaveTargets,
		Now: func() time.Time { return s.cfg.Clock.Now() }, Release: s.ReleaseHeld}}
}

// adminStore implements admin.Store for a Store (whose Retry and Cancel
// are storekit.Store's), and admin.Targets with durable.Targets.
type adminStore[T any] struct {
	s *Store[T]
	durable.Targets
}

// ErrNotBound is returned by the admin API, the storekit.TargetStore and
// storekit.SlotStore methods of a Store that was not passed to queue.New (or
// queue.NewWithStore) yet: it does not know its queue's name and
// priorities.
var ErrNotBound = errors.New("redisstore: the store was not passed to queue.New yet: it needs its queue")

// errCancelledByAdmin is the reason reported for a job an operator
// cancelled (admin Cancel) or deleted before it ran to its end.
var errCancelledByAdmin = errors.New("redisstore: cancelled by an operator (admin Cancel or Delete)")

// ready reports ErrNotBound before Init.
func (s *Store[T]) adminReady() error {
	s.initMu.Lock()
	defer s.initMu.Unlock()
	if !s.bound {
		return ErrNotBound
	}
	return nil
}

// noteCancels records which of refs' jobs an operator asked to cancel, as
// the last heartbeat found them.
func (s *Store[T]) noteCancels(refs []leaseRef, cancel map[int64]bool) {
	s.cancelMu.Lock()
	defer s.cancelMu.Unlock()
	for _, r := range refs {
		if cancel[r.id] {
			if s.cancelReq == nil {
				s.cancelReq = map[int64]bool{}
			}
			s.cancelReq[r.id] = true
		} else {
			delete(s.cancelReq, r.id)
		}
	}
	s.nCancel.Store(int32(len(s.cancelReq)))
}

// forgetCancel drops the cancel request of job id, which ended here.
func (s *Store[T]) forgetCancel(id int64) {
	if s.nCancel.Load() == 0 {
		return // the common case: no lock on the outcome's path
	}
	s.cancelMu.Lock()
	delete(s.cancelReq, id)
	s.nCancel.Store(int32(len(s.cancelReq)))
	s.cancelMu.Unlock()
}

// CancelRequested reports whether the last Heartbeat found that an
// operator asked to cancel running job id (admin Cancel), rather than its
// lease lost: the queue then ends the job as cancelled.
func (s *Store[T]) CancelRequested(id int64) bool {
	s.cancelMu.Lock()
	defer s.cancelMu.Unlock()
	return s.cancelReq[id]
}

// shardOf returns the shard that stores job id.
func (s *Store[T]) shardOf(id int64) *shard {
	for _, sh := range s.shards {
		if !sh.sharded || id&31 == sh.code {
			return sh
		}
	}
	return s.shards[0]
}

// adminErr wraps a command's error for the admin API.
func adminErr(what string, err error) error {
	return fmt.Errorf("redisstore: admin %s: %w", what, err)
}

// zset describes how List pages one state: the sorted set of the state
// on a shard, whether its members are zero-padded IDs (the ready index),
// the meta state a job must be in, and the meta field its score is.
type zset struct {
	key    func(ks keyspace) string
	padded bool
	state  string
}

var listSets = map[admin.State]zset{
	admin.Ready:     {key: func(ks keyspace) string { return ks.fixed[kReadyIdx] }, padded: true, state: "q"},
	admin.Scheduled: {key: func(ks keyspace) string { return ks.fixed[kSched] }, state: "s"},
	admin.Dead:      {key: func(ks keyspace) string { return ks.fixed[kDead] }, state: "d"},
}

// found is one job List found, with its keyset position.
type found struct {
	info admin.JobInfo
	pos  admin.Cursor
}

// List implements admin.Store through ListBounded (admin.ListAll).
func (a *adminStore[T]) List(ctx context.Context, f admin.Filter, oldest bool, after *admin.Cursor, limit int, payload bool) ([]admin.JobInfo, error) {
	return admin.ListAll(ctx, a, f, oldest, after, limit, payload)
}

// ListBounded implements admin.BoundedLister: keyset paging over each shard's sorted set
// of the state (ready: the ready index, by enqueue time; scheduled: the
// schedule, by due time; dead: the dead set, by the time it died; then
// ID), O(log n + the jobs read) per page, the filters applied to the jobs
// read. Running jobs (at most the workers of every process) are read
// whole and sorted by claim time. Within one millisecond, scheduled and
// dead jobs sort by their ID's decimal text, ready ones by ID. Coalesced
// reruns (counted as scheduled) and jobs in a process's outage fallback
// are not listed; Waiting, Done and Cancelled list nothing.
//
// A filtered List reads at most admin.MaxExamined members of the state's
// sets per call, shared evenly between the shards: a shard that reaches
// its share stops at the last member it read, and the answer stops at the
// least advanced of those positions (matches past it, read on another
// shard, come again on the next call).
func (a *adminStore[T]) ListBounded(ctx context.Context, f admin.Filter, oldest bool, after *admin.Cursor, limit int, payload bool) (admin.Listed, error) {
	s := a.s
	if err := s.adminReady(); err != nil {
		return admin.Listed{}, err
	}
	if f.Priority != "" && s.cfg.PriorityIndex(f.Priority) < 0 {
		return admin.Listed{}, nil // no job has it
	}
	budget := max(1, admin.MaxExamined/len(s.shards))
	var (
		all  []found
		l    admin.Listed
		stop *admin.Cursor
	)
	// later reports whether x comes after y in the page order.
	later := func(x, y admin.Cursor) bool {
		if oldest {
			return cmpPos(x, y) > 0
		}
		return cmpPos(x, y) < 0
	}
	for _, sh := range s.shards {
		if f.Priority != "" && !sh.serves(f.Priority) {
			continue
		}
		var w walked
		var err error
		if f.State == admin.Running {
			w, err = s.listRunning(ctx, sh, f, oldest, after, limit)
		} else if z, ok := listSets[f.State]; ok {
			w, err = s.listSet(ctx, sh, z, f, oldest, after, limit, budget)
		}
		if err != nil {
			return admin.Listed{}, adminErr("list", err)
		}
		all = append(all, w.found...)
		l.Examined += w.examined
		if w.stop != nil && (stop == nil || later(*stop, *w.stop)) {
			stop = w.stop
		}
	}
	if stop != nil {
		all = slices.DeleteFunc(all, func(x found) bool { return later(x.pos, *stop) })
	}
	slices.SortFunc(all, func(x, y found) int {
		c := cmpPos(x.pos, y.pos)
		if !oldest {
			c = -c
		}
		return c
	})
	all = all[:min(len(all), limit)]
	if len(all) < limit {
		l.Stop = stop
	}
	l.Jobs = make([]admin.JobInfo, len(all))
	for i := range all {
		l.Jobs[i] = all[i].info
	}
	if payload && len(l.Jobs) > 0 {
		if err := s.fillPayloads(ctx, l.Jobs); err != nil {
			return admin.Listed{}, adminErr("list", err)
		}
	}
	return l, nil
}

// indexBatch bounds the jobs one scriptIndexReady call indexes.
var indexBatch = 1000

// indexReady brings sh's ready index up to date with its ready lists (the
// jobs pushed to their tails since it was last read), indexBatch jobs per
// script call.
func indexReady(ctx context.Context, sh *shard) error {
	for {
		more, err := sh.run(ctx, sh.client, scriptIndexReady, nil, indexBatch).Int()
		if err != nil || more == 0 {
			return err
		}
	}
}

// walked is what List read on one shard: the matches, the members it
// examined and, when it stopped at its share of admin.MaxExamined before
// finding enough matches, the position of the last member it read.
type walked struct {
	found    []found
	examined int
	stop     *admin.Cursor
}

func cmpPos(x, y admin.Cursor) int {
	if c := x.At.Compare(y.At); c != 0 {
		return c
	}
	return cmp.Compare(x.ID, y.ID)
}

// member is job id's member in a sorted set of the state.
func member(id int64, padded bool) string {
	if padded {
		return fmt.Sprintf("%020d", id)
	}
	return strconv.FormatInt(id, 10)
}

// listSet pages z on sh from after, reading the jobs' records a page at a
// time until limit jobs in the state match f or the set ends; with a
// filter, it reads at most budget members.
func (s *Store[T]) listSet(ctx context.Context, sh *shard, z zset, f admin.Filter, oldest bool, after *admin.Cursor, limit, budget int) (walked, error) {
	key := z.key(sh.ks)
	if f.State == admin.Ready {
		if err := indexReady(ctx, sh); err != nil {
			return walked{}, err
		}
	}
	rev := boolArg(!oldest)
	has, at, mem := "0", int64(0), ""
	if after != nil {
		has, at, mem = "1", after.At.UnixMilli(), member(after.ID, z.padded)
	}
	// A page reads limit members, with a margin for the jobs that left
	// the state; with a filter, twice as many each time, up to 2000, and
	// no more than budget in all.
	batch := limit + 8
	filtered := f.Target != "" || f.KeyPrefix != "" || (f.Priority != "" && len(sh.labels) > 1)
	var w walked
	for ; ; batch = min(2*batch, 2000) {
		if !filtered {
			batch = limit - len(w.found) + 8
		} else {
			batch = min(batch, budget-w.examined)
		}
		res, err := scriptZPage.Run(ctx, sh.client, []string{key}, rev, has, at, mem, batch).StringSlice()
		if err != nil {
			return walked{}, err
		}
		if len(res) == 0 {
			return w, nil
		}
		w.examined += len(res) / 2
		ids := make([]string, 0, len(res)/2)
		for i := 0; i+1 < len(res); i += 2 {
			id, err := strconv.ParseInt(res[i], 10, 64)
			if err != nil {
				return walked{}, fmt.Errorf("sorted set %s holds %q, not a job ID", key, res[i])
			}
			ids = append(ids, strconv.FormatInt(id, 10))
		}
		metas, err := sh.client.HMGet(ctx, sh.ks.fixed[kMeta], ids...).Result()
		if err != nil {
			return walked{}, err
		}
		for i, raw := range metas {
			// Most records a filtered page examines do not match: a look
			// at the record's text rules those out without decoding it.
			if filtered && !mayMatch(raw, f) {
				continue
			}
			m, ok := parseMeta(raw)
			// A job that left the state since the set was read (a
			// claim, a cancel) is skipped, as it would be a moment later.
			if !ok || m.State != z.state || !matches(f, &m) {
				continue
			}
			id, _ := strconv.ParseInt(ids[i], 10, 64)
			j := s.jobInfo(id, &m)
			w.found = append(w.found, found{info: j, pos: admin.Position(j)})
			if len(w.found) == limit {
				return w, nil
			}
		}
		if len(res)/2 < batch {
			return w, nil
		}
		// Go on after the last member read.
		last := len(res) - 2
		score, err := strconv.ParseFloat(res[last+1], 64)
		if err != nil {
			return walked{}, fmt.Errorf("sorted set %s: score %q: %w", key, res[last+1], err)
		}
		has, at, mem = "1", int64(score), res[last]
		if filtered && w.examined >= budget {
			id, _ := strconv.ParseInt(ids[len(ids)-1], 10, 64)
			w.stop = &admin.Cursor{At: time.UnixMilli(int64(score)).UTC(), ID: id}
			return w, nil
		}
	}
}

// listRunning reads every running job of sh (they are at most the
// workers of every process) and returns those matching f after the
// position, in order, at most limit.
func (s *Store[T]) listRunning(ctx context.Context, sh *shard, f admin.Filter, oldest bool, after *admin.Cursor, limit int) (walked, error) {
	ids, err := sh.client.ZRange(ctx, sh.ks.fixed[kRun], 0, -1).Result()
	if err != nil || len(ids) == 0 {
		return walked{}, err
	}
	metas, err := sh.client.HMGet(ctx, sh.ks.fixed[kMeta], ids...).Result()
	if err != nil {
		return walked{}, err
	}
	var out []found
	for i, raw := range metas {
		m, ok := parseMeta(raw)
		if !ok || m.State != "x" || !matches(f, &m) {
			continue
		}
		id, _ := strconv.ParseInt(ids[i], 10, 64)
		j := s.jobInfo(id, &m)
		p := admin.Position(j)
		if after != nil && (oldest && !after.Before(p) || !oldest && !p.Before(*after)) {
			continue
		}
		out = append(out, found{info: j, pos: p})
	}
	slices.SortFunc(out, func(x, y found) int {
		if oldest {
			return cmpPos(x.pos, y.pos)
		}
		return cmpPos(y.pos, x.pos)
	})
	return walked{found: out[:min(len(out), limit)], examined: len(ids)}, nil
}

// matches reports whether m passes f's priority, target and key filters.
func matches(f admin.Filter, m *meta) bool {
	return (f.Priority == "" || f.Priority == m.Priority) && (f.Target == "" || f.Target == m.Target) &&
		strings.HasPrefix(m.Key, f.KeyPrefix)
}

// mayMatch reports whether raw, a job's meta record as HMGET returned it,
// can pass f's priority, target and key filters, reading the fields'
// text instead of decoding the record: false only when parseMeta and
// matches would reject it too. A field written without escapes (the
// common case: neither the add script's writer nor cjson escapes
// anything but quote, backslash, control characters and, for cjson,
// slash) is its value byte for byte, valid UTF-8 or not; a field with an
// escape, or a record whose layout is not the writers', answers true and
// is decoded.
func mayMatch(raw any, f admin.Filter) bool {
	rec, ok := raw.(string)
	if !ok {
		return false // no record: parseMeta rejects it too
	}
	if f.Priority != "" {
		if v, plain := rawField(rec, `"p":`); plain && v != f.Priority {
			return false
		}
	}
	if f.Target != "" {
		if v, plain := rawField(rec, `"t":`); plain && v != f.Target {
			return false
		}
	}
	if f.KeyPrefix != "" {
		if v, plain := rawField(rec, `"k":`); plain && !strings.HasPrefix(v, f.KeyPrefix) {
			return false
		}
	}
	return true
}

// rawField returns the value of the string field named by name (its
// quoted name and the colon) in rec, a meta record, when it can be read
// from the text as it is: plain is false when the value holds an escape
// or is not a string. An absent field is the empty string (json.Unmarshal
// leaves it so). The quoted name cannot occur inside a string value,
// where every quote is escaped: a match is the field itself.
func rawField(rec, name string) (v string, plain bool) {
	i := strings.Index(rec, name)
	if i < 0 {
		// Absent, unless the name is written in some other way (a
		// space before the colon, say): the writers never do, but then
		// decode.
		return "", !strings.Contains(rec, name[:len(name)-1])
	}
	rest := rec[i+len(name):]
	if len(rest) == 0 || rest[0] != '"' {
		return "", false
	}
	rest = rest[1:]
	end := strings.IndexAny(rest, `"\`)
	if end < 0 || rest[end] != '"' {
		return "", false
	}
	return rest[:end], true
}

// adminState maps a meta record's state to the admin API's.
func adminState(st string) admin.State {
	switch st {
	case "q":
		return admin.Ready
	case "x":
		return admin.Running
	case "d":
		return admin.Dead
	}
	return admin.Scheduled // s, and w: a coalesced rerun
}

// jobInfo describes job id from its meta record.
func (s *Store[T]) jobInfo(id int64, m *meta) admin.JobInfo {
	j := admin.JobInfo{ID: id, Key: m.Key, Group: m.Group, Target: m.Target, Priority: m.Priority,
		State: adminState(m.State), Attempt: m.Attempt, MaxAttempts: m.Max, LastError: m.Err,
		RunAt: msTime(m.RunAt), Created: msTime(m.Created)}
	j.Meta, _ = jobMeta(m.Meta) // a record whose md does not decode lists without it
	switch m.State {
	case "x":
		j.Updated = msTime(m.Claimed)
		if m.Cancel != 0 && j.LastError == "" {
			j.LastError = "cancel requested"
		}
	case "d":
		j.Updated = msTime(m.DeadAt)
	case "q":
		j.Updated = j.Created
	default:
		j.Updated = j.RunAt
	}
	return j
}

// msTime is the time of ms milliseconds since the epoch, zero for 0.
func msTime(ms float64) time.Time {
	if ms <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(int64(ms)).UTC()
}

// fillPayloads reads the jobs' encoded payloads, a pipeline per call.
func (s *Store[T]) fillPayloads(ctx context.Context, jobs []admin.JobInfo) error {
	per := map[*shard][]int{}
	for i := range jobs {
		sh := s.shardOf(jobs[i].ID)
		per[sh] = append(per[sh], i)
	}
	for sh, idx := range per {
		ids := make([]string, len(idx))
		for k, i := range idx {
			ids[k] = strconv.FormatInt(jobs[i].ID, 10)
		}
		vals, err := sh.client.HMGet(ctx, sh.ks.fixed[kData], ids...).Result()
		if err != nil {
			return err
		}
		for k, i := range idx {
			if v, ok := vals[k].(string); ok {
				jobs[i].Payload = []byte(v)
			}
		}
	}
	return nil
}

// Get implements admin.Store.
func (a *adminStore[T]) Get(ctx context.Context, id int64, payload bool) (admin.JobInfo, error) {
	s := a.s
	if err := s.adminReady(); err != nil {
		return admin.JobInfo{}, err
	}
	return s.getOne(ctx, s.shardOf(id), id, payload, fmt.Sprintf("job %d", id))
}

// A job not found may be in the inbox (see inbox.go): getOne moves the
// inbox's jobs and looks again.
func (s *Store[T]) getOne(ctx context.Context, sh *shard, id int64, payload bool, name string) (admin.JobInfo, error) {
	f := strconv.FormatInt(id, 10)
	var raw string
	var dc *redis.StringCmd
	for try := 0; ; try++ {
		pipe := sh.client.Pipeline()
		mc := pipe.HGet(ctx, sh.ks.fixed[kMeta], f)
		dc = nil
		if payload {
			dc = pipe.HGet(ctx, sh.ks.fixed[kData], f)
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return admin.JobInfo{}, adminErr("get", err)
		}
		var err error
		raw, err = mc.Result()
		if err == nil {
			break
		}
		if !errors.Is(err, redis.Nil) {
			return admin.JobInfo{}, adminErr("get", err)
		}
		if try == 1 {
			return admin.JobInfo{}, fmt.Errorf("redisstore: %s: %w", name, admin.ErrNotFound)
		}
		if err := s.runInbox(ctx, sh, false); err != nil {
			return admin.JobInfo{}, adminErr("get", err)
		}
	}
	m, ok := parseMeta(raw)
	if !ok {
		return admin.JobInfo{}, fmt.Errorf("redisstore: %s: its record %q does not decode", name, raw)
	}
	j := s.jobInfo(id, &m)
	if dc != nil {
		if v, err := dc.Result(); err == nil {
			j.Payload = []byte(v)
		}
	}
	return j, nil
}

// GetKey implements admin.Store: the job holding key (ready, scheduled,
// running), else its coalesced rerun, else the newest dead job with the
// key (the dead keys hash, kept by the scripts that bury, retry, delete
// and trim dead jobs), on the shards in priority order. Completed and
// cancelled jobs are not kept: a key whose job ended so is not found.
func (a *adminStore[T]) GetKey(ctx context.Context, key string, payload bool) (admin.JobInfo, error) {
	s := a.s
	if err := s.adminReady(); err != nil {
		return admin.JobInfo{}, err
	}
	name := fmt.Sprintf("key %q", key)
	if key == "" {
		return admin.JobInfo{}, fmt.Errorf("redisstore: %s: %w", name, admin.ErrNotFound)
	}
	for _, h := range []int{kKeys, kReruns, kDeadKeys} {
		for _, sh := range s.shards {
			v, err := sh.client.HGet(ctx, sh.ks.fixed[h], key).Result()
			if errors.Is(err, redis.Nil) {
				continue
			}
			if err != nil {
				return admin.JobInfo{}, adminErr("get", err)
			}
			id, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				continue
			}
			j, err := s.getOne(ctx, sh, id, payload, name)
			if errors.Is(err, admin.ErrNotFound) {
				continue // ended meanwhile
			}
			return j, err
		}
	}
	return admin.JobInfo{}, fmt.Errorf("redisstore: %s: %w", name, admin.ErrNotFound)
}

// Counts implements admin.Store from counters and cardinalities, O(1)
// per shard: ready from the ready counters (as Stats), scheduled the
// schedule and the coalesced reruns, running and dead their sets. Done
// and Cancelled are absent: Redis does not keep those jobs.
func (a *adminStore[T]) Counts(ctx context.Context) (map[admin.State]int, error) {
	s := a.s
	if err := s.adminReady(); err != nil {
		return nil, err
	}
	out := map[admin.State]int{}
	for _, sh := range s.shards {
		// The inboxes' jobs are ready jobs: drained into the counters
		// first.
		if err := s.runInbox(ctx, sh, false); err != nil {
			return nil, adminErr("counts", err)
		}
		pipe := sh.client.Pipeline()
		fields := make([]string, len(sh.labels))
		for i, l := range sh.labels {
			fields[i] = "r:" + l
		}
		rc := pipe.HMGet(ctx, sh.ks.fixed[kCount], fields...)
		sc := pipe.ZCard(ctx, sh.ks.fixed[kSched])
		wc := pipe.HLen(ctx, sh.ks.fixed[kReruns])
		xc := pipe.ZCard(ctx, sh.ks.fixed[kRun])
		dc := pipe.ZCard(ctx, sh.ks.fixed[kDead])
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, adminErr("counts", err)
		}
		for _, v := range rc.Val() {
			if str, ok := v.(string); ok {
				n, _ := strconv.Atoi(str)
				out[admin.Ready] += max(n, 0)
			}
		}
		out[admin.Scheduled] += int(sc.Val() + wc.Val())
		out[admin.Running] += int(xc.Val())
		out[admin.Dead] += int(dc.Val())
	}
	return out, nil
}

// act runs the admin script for job id and interprets its status.
func (s *Store[T]) act(ctx context.Context, what string, id int64) (string, error) {
	if err := s.adminReady(); err != nil {
		return "", err
	}
	sh := s.shardOf(id)
	now := s.now()
	res, err := sh.run(ctx, sh.client, scriptAdmin, nil, what, id, now).Slice()
	if err != nil {
		return "", adminErr(what, err)
	}
	status := replyString(res[0])
	sh.ready.Store(replyInt(res[1]))
	if status == "notfound" {
		return "", fmt.Errorf("redisstore: %s job %d: %w", what, id, admin.ErrNotFound)
	}
	st, key, target, label, attempt := replyString(res[2]), replyString(res[3]), replyString(res[4]), replyString(res[5]), replyInt(res[6])
	switch status {
	case "state":
		return "", fmt.Errorf("redisstore: %s job %d (%s): %w", what, id, adminState(st), admin.ErrState)
	case "dup":
		return "", fmt.Errorf("redisstore: %s job %d: %w", what, id, &queue.DuplicateError{Key: key})
	case "cancelled":
		// It had not run to its end: reported cancelled.
		s.cfg.Report(queue.Event{Kind: queue.EventCancelled, Time: time.UnixMilli(now), JobID: id, Key: key,
			Target: target, Priority: label, Attempt: int(attempt), Err: errCancelledByAdmin})
	case "ok":
		s.signal()
	}
	return status, nil
}

// Retry implements admin.Store: a dead job becomes ready now, at the end
// of its ready list, with its attempts reset and its key taken again; the
// processes waiting to claim are woken. Capacity is not checked. If
// another pending or running job holds its key, it returns a
// *queue.DuplicateError (matching queue.ErrDuplicate) and the job stays
// dead. Redis keeps no cancelled jobs, so only dead ones can be retried.
// Against the janitor's trim, whichever script runs first wins: a job
// trimmed first is not found; a job retried first is no longer dead.
func (a *adminStore[T]) Retry(ctx context.Context, id int64) error {
	_, err := a.s.act(ctx, "retry", id)
	return err
}

// Delete implements admin.Store: a ready, scheduled, rerun or dead job is
// deleted (a running one: ErrState, cancel it instead), releasing its key
// and group; a rerun waiting for the key becomes ready. A job that had
// not run to its end is reported cancelled (queue.EventCancelled).
func (a *adminStore[T]) Delete(ctx context.Context, id int64) error {
	_, err := a.s.act(ctx, "delete", id)
	return err
}

// Cancel implements admin.Store. A ready, scheduled or rerun job ends
// cancelled at once (it is deleted: Redis keeps no cancelled jobs), and a
// rerun waiting for its key becomes ready. A running job is marked: the
// process running it learns at its next heartbeat (within the heartbeat
// interval, a third of WithLeaseTTL), cancels the job's context, and ends
// it as cancelled when the handler returns; a handler that returns
// before the heartbeat completes it as usual. If that process is gone,
// the lease rescue ends the job cancelled instead of running it again.
// Cancelling a running job twice is not an error.
func (a *adminStore[T]) Cancel(ctx context.Context, id int64) error {
	_, err := a.s.act(ctx, "cancel", id)
	return err
}

// Pause implements admin.Store: the queue's paused key is set on every
// shard, and every process's claim script then claims nothing (the test
// is in the script, so no claim starts after Pause returns). Enqueues,
// promotion of scheduled jobs, outcomes, heartbeats and lease rescue go
// on; running jobs run to their end.
func (a *adminStore[T]) Pause(ctx context.Context) error {
	s := a.s
	if err := s.adminReady(); err != nil {
		return err
	}
	for _, sh := range s.shards {
		if err := sh.client.Set(ctx, sh.ks.fixed[kPaused], "1", 0).Err(); err != nil {
			return adminErr("pause", err)
		}
	}
	return nil
}

// Resume implements admin.Store: the paused key is deleted and wake-up
// tokens pushed, as many as the wake list keeps (64), so that the waiting
// workers of every process (up to 64 per shard) claim at once.
func (a *adminStore[T]) Resume(ctx context.Context) error {
	s := a.s
	if err := s.adminReady(); err != nil {
		return err
	}
	for _, sh := range s.shards {
		_, err := sh.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Del(ctx, sh.ks.fixed[kPaused])
			// One token wakes one Claim in one process, and a Claim that
			// finds more jobs ready wakes only its own process's next:
			// 16 tokens left the 17th idle process asleep until its poll.
			tokens := make([]any, 64)
			for i := range tokens {
				tokens[i] = "1"
			}
			p.RPush(ctx, sh.ks.fixed[kWake], tokens...)
			p.LTrim(ctx, sh.ks.fixed[kWake], -64, -1)
			return nil
		})
		if err != nil {
			return adminErr("resume", err)
		}
	}
	s.signal()
	return nil
}

// Paused implements admin.Store: whether the first shard's paused key
// exists (Pause and Resume set every shard's).
func (a *adminStore[T]) Paused(ctx context.Context) (bool, error) {
	s := a.s
	if err := s.adminReady(); err != nil {
		return false, err
	}
	sh := s.shards[0]
	n, err := sh.client.Exists(ctx, sh.ks.fixed[kPaused]).Result()
	if err != nil {
		return false, adminErr("paused", err)
	}
	return n > 0, nil
}
