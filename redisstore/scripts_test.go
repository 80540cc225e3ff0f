package redisstore

import (
	"bufio"
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/admin"
	"github.com/queuekit/queue/queuetest"
	"github.com/queuekit/queue/storekit"
	"github.com/queuekit/queue/storetest"
)

// TestScriptsDeclareKeys runs every script under MONITOR and checks, with
// COMMAND GETKEYS, that each command a script runs touches only keys the
// call declared in KEYS, as Redis Cluster requires.
func TestScriptsDeclareKeys(t *testing.T) {
	c := needRedis(t)
	prefix := testPrefix(t, c)
	lines := monitor(t)

	clk := queuetest.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	s := openStore(t, c, clk, WithPrefix(prefix))
	ctx := context.Background()
	exerciseScripts(t, ctx, s, clk)
	sh := s.shards[0]
	keys := []string{sh.ks.tag + ":leader-test"}
	if err := c.Do(ctx, "SET", keys[0], "me", "NX", "PX", 10000).Err(); err != nil {
		t.Fatal(err)
	}
	must(t, scriptLeaderRenew.Run(ctx, c, keys, "me", 10000).Err())
	must(t, scriptLeaderRelease.Run(ctx, c, keys, "me").Err())

	names := map[string]string{scriptLeaderRenew.Hash(): "leader-renew", scriptLeaderRelease.Hash(): "leader-release"}
	for _, sc := range jobScripts {
		names[sc.Hash()] = sc.name
	}
	ran := map[string]int{}
	checked, inboxed := 0, 0
	var declared map[string]bool
	var script string
	for _, l := range lines() {
		src, args, ok := parseMonitorLine(l)
		if !ok || len(args) == 0 {
			continue
		}
		if src != "lua" {
			declared, script = nil, ""
			cmd := strings.ToLower(args[0])
			if (cmd == "evalsha" || cmd == "eval") && len(args) >= 3 {
				n, _ := strconv.Atoi(args[2])
				if n > len(args)-3 || !strings.Contains(strings.Join(args[3:3+n], " "), prefix) {
					continue
				}
				declared = map[string]bool{}
				for _, k := range args[3 : 3+n] {
					declared[k] = true
				}
				script = names[args[1]]
				if cmd == "eval" {
					script = "eval"
				}
				ran[script]++
			}
			continue
		}
		if declared == nil {
			continue
		}
		gk := make([]any, len(args))
		for i, a := range args {
			gk[i] = a
		}
		touched, err := c.CommandGetKeys(ctx, gk...).Result()
		if err != nil {
			continue // a command without keys
		}
		for _, k := range touched {
			checked++
			if strings.Contains(k, ":inbox:") {
				inboxed++
			}
			if !declared[k] {
				t.Errorf("script %s: %q touches undeclared key %q", script, strings.Join(args, " "), k)
			}
		}
	}
	for _, name := range names {
		if ran[name] == 0 {
			t.Errorf("script %s never ran under MONITOR; the test must exercise it", name)
		}
	}
	if inboxed == 0 {
		t.Error("no script touched an inbox; the test must drain one")
	}
	if checked < 50 {
		t.Fatalf("checked only %d key accesses; is MONITOR working?", checked)
	}
	t.Logf("checked %d key accesses made by %d scripts", checked, len(ran))
}

// exerciseScripts makes every job script run, most in several branches.
func exerciseScripts(t *testing.T, ctx context.Context, s *Store[int], clk *queuetest.FakeClock) {
	t.Helper()
	add := func(j queue.Job[int]) {
		t.Helper()
		if _, err := s.Add(ctx, j); err != nil {
			t.Fatalf("Add: %v", err)
		}
	}
	claim := func() queue.Job[int] {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		j, err := s.Claim(cctx)
		if err != nil {
			t.Fatalf("Claim: %v", err)
		}
		return j
	}
	later := clk.Now().Add(time.Minute)
	add(queue.Job[int]{Key: "a", Payload: 1})
	add(queue.Job[int]{Key: "b", Group: "g", RunAt: later, Payload: 2})
	add(queue.Job[int]{Key: "c", Priority: "high", Payload: 3})
	j := claim()                              // c
	add(queue.Job[int]{Key: "c", Payload: 4}) // rerun
	err := s.Retry(ctx, j, later, errors.New("x"))
	if !errors.Is(err, storekit.ErrSuperseded) {
		t.Fatalf("Retry = %v, want superseded", err)
	}
	j = claim() // rerun of c
	must(t, s.Defer(ctx, j, clk.Now(), nil))
	j = claim()
	must(t, s.Dead(ctx, j, errors.New("dead")))
	j = claim() // a
	_, err = s.Heartbeat(ctx, []int64{j.ID})
	must(t, err)
	clk.Advance(time.Hour)
	_, err = s.RescueExpired(ctx)
	must(t, err)
	_, err = s.PromoteDue(ctx)
	must(t, err)
	j = claim()
	must(t, s.Retry(ctx, j, clk.Now().Add(time.Second), errors.New("again")))
	add(queue.Job[int]{Key: "d", Payload: 5})
	_, err = s.Cancel(ctx, "d")
	must(t, err)
	_, err = s.CancelMatch(ctx, func(string) bool { return true })
	must(t, err)
	add(queue.Job[int]{Key: "e", Payload: 6})
	add(queue.Job[int]{Key: "f", RunAt: clk.Now().Add(time.Hour), Payload: 7})
	j = claim()
	add(queue.Job[int]{Key: "e", Payload: 8}) // rerun, removed by Purge
	add(queue.Job[int]{Payload: 9})           // add-one, removed by Purge
	// add-ready takes batches of plain jobs, removed by Purge.
	sh := s.shards[0]
	var batch []addItem
	for range 2 {
		id, seq, blk, err := sh.newID(ctx)
		must(t, err)
		batch = append(batch, addItem{id: id, seq: seq, blk: blk, label: "normal", enc: []byte("10")})
	}
	_, err = s.runAdd(ctx, sh, batch)
	must(t, err)
	// The admin API's scripts: zpage from the start and from a cursor,
	// and the admin script's actions.
	a := admin.New(s.Admin())
	p, err := a.List(ctx, admin.Query{Filter: admin.Filter{State: admin.Ready}, Limit: 1})
	must(t, err)
	_, err = a.List(ctx, admin.Query{Filter: admin.Filter{State: admin.Ready}, Limit: 1, After: p.Next})
	must(t, err)
	dead, err := a.List(ctx, admin.Query{Filter: admin.Filter{State: admin.Dead}, Oldest: true})
	must(t, err)
	for _, d := range dead.Jobs {
		if err := a.Retry(ctx, d.ID); err != nil && !errors.Is(err, queue.ErrDuplicate) {
			t.Fatal(err)
		}
	}
	must(t, a.Cancel(ctx, j.ID))
	lost, err := s.Heartbeat(ctx, []int64{j.ID})
	must(t, err)
	if len(lost) != 1 || !s.CancelRequested(j.ID) {
		t.Fatalf("Heartbeat after an admin Cancel: lost %v, CancelRequested %v", lost, s.CancelRequested(j.ID))
	}
	f, err := a.GetKey(ctx, "f", false)
	must(t, err)
	must(t, a.Cancel(ctx, f.ID))
	must(t, a.Delete(ctx, p.Jobs[0].ID))
	_, err = s.Purge(ctx)
	must(t, err)
	must(t, s.Complete(ctx, j))
	must(t, s.trimDead(ctx, s.shards[0]))
	// A job held for its target (settle's hold mode), then released.
	add(queue.Job[int]{Key: "h", Target: "api", Payload: 11})
	j = claim()
	must(t, s.Hold(ctx, j, clk.Now().Add(time.Hour)))
	if n, err := s.ReleaseHeld(ctx, "api"); err != nil || n != 1 {
		t.Fatalf("ReleaseHeld = %d, %v; want 1", n, err)
	}
	_, err = s.Stats(ctx)
	must(t, err)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// monitor starts MONITOR on its own connection and returns a function that
// stops it and returns the lines seen.
func monitor(t *testing.T) func() []string {
	t.Helper()
	conn, err := net.Dial("tcp", redisAddr())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(conn)
	if l, err := rd.ReadString('\n'); err != nil || !strings.HasPrefix(l, "+OK") {
		t.Fatalf("MONITOR: %q, %v", l, err)
	}
	var mu sync.Mutex
	var lines []string
	// An ECHO of marker marks the end: the reader closes seen when MONITOR
	// shows it.
	marker := "end-of-monitor-" + strconv.FormatInt(time.Now().UnixNano(), 10)
	seen := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		marked := false
		for {
			l, err := rd.ReadString('\n')
			if err != nil {
				return
			}
			mu.Lock()
			lines = append(lines, strings.TrimRight(strings.TrimPrefix(l, "+"), "\r\n"))
			mu.Unlock()
			if !marked && strings.Contains(l, marker) {
				marked = true
				close(seen)
			}
		}
	}()
	t.Cleanup(func() { conn.Close() })
	return func() []string {
		c := needRedis(t)
		c.Echo(context.Background(), marker)
		select {
		case <-seen:
		case <-time.After(5 * time.Second):
			t.Logf("MONITOR did not show the end marker within 5s; the lines may be incomplete")
		}
		conn.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return lines
	}
}

// parseMonitorLine splits `1700000000.000000 [0 lua] "set" "k" "v"` into
// the source ("lua" or a client address) and the unquoted arguments.
func parseMonitorLine(l string) (src string, args []string, ok bool) {
	open := strings.IndexByte(l, '[')
	end := strings.IndexByte(l, ']')
	if open < 0 || end < open {
		return "", nil, false
	}
	f := strings.Fields(l[open+1 : end])
	if len(f) < 2 {
		return "", nil, false
	}
	src = f[1]
	rest := l[end+1:]
	for i := 0; i < len(rest); i++ {
		if rest[i] != '"' {
			continue
		}
		var b strings.Builder
		for i++; i < len(rest) && rest[i] != '"'; i++ {
			if rest[i] != '\\' || i+1 >= len(rest) {
				b.WriteByte(rest[i])
				continue
			}
			i++
			switch rest[i] {
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case 'a':
				b.WriteByte('\a')
			case 'b':
				b.WriteByte('\b')
			case 'x':
				if i+2 < len(rest) {
					v, _ := strconv.ParseUint(rest[i+1:i+3], 16, 8)
					b.WriteByte(byte(v))
					i += 2
				}
			default:
				b.WriteByte(rest[i])
			}
		}
		args = append(args, b.String())
	}
	return src, args, true
}

// openStore returns a started store bound to a test configuration.
func openStore(t *testing.T, c redis.UniversalClient, clk queue.Clock, opts ...Option) *Store[int] {
	t.Helper()
	return openStoreCfg(t, c, clk, nil, opts...)
}

func openStoreCfg(t *testing.T, c redis.UniversalClient, clk queue.Clock, mutate func(*storekit.Config), opts ...Option) *Store[int] {
	t.Helper()
	s, err := New[int](c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	startStore(t, s, clk, mutate)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// startStore initialises s with the tests' configuration (mutated by
// mutate, if not nil) and starts it; the caller closes it.
func startStore(t *testing.T, s *Store[int], clk queue.Clock, mutate func(*storekit.Config)) {
	t.Helper()
	cfg := storetest.Config("q", 100000, clk, func(queue.Event) {}) // a nil clk is the system clock
	cfg.Logger = quietLogger()
	if mutate != nil {
		mutate(&cfg)
	}
	if err := s.Init(cfg); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestRunArgvNoScript: a script Redis does not have runs with EVAL.
func TestRunArgvNoScript(t *testing.T) {
	c := needRedis(t)
	key := testPrefix(t, c) + ":argv"
	sc := newRawScript("test", "-- "+strconv.FormatInt(time.Now().UnixNano(), 10)+"\nreturn redis.call('INCRBY', KEYS[1], ARGV[1])")
	ctx := context.Background()
	for want := int64(2); want <= 4; want += 2 {
		n, err := sc.runArgv(ctx, c, []any{"evalsha", sc.hash, 1, key, 2}).Int64()
		if err != nil || n != want {
			t.Fatalf("runArgv = %d, %v; want %d", n, err, want)
		}
	}
	must(t, c.Del(ctx, key).Err())
}
