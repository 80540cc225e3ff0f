package bench

import (
	"strings"
	"testing"
)

// TestDurableTargetsFindStoreRows builds the durable rows the way a run
// does (a store registered with no options, then the persistence mode
// appended) and checks that every durable target finds its rows. A store
// without options used to leave "producers=1, , persistence off", which
// the enqueue target's lookup never matched.
func TestDurableTargetsFindStoreRows(t *testing.T) {
	mode := "persistence off"
	row := func(system, kase, setting, options string, rate float64) DurableResult {
		return DurableResult{System: system, Case: kase, Setting: joinSetting(joinSetting(setting, options), mode), Jobs: 1, Rate: rate}
	}
	res := Results{Config: Config{Durable: &DurableConfig{BurnWorkers: []int{100}}}}
	res.Durable = []TaskResult{
		{Task: Task{Kind: KindDurable, System: "asynq"}, Durable: []DurableResult{
			row("asynq", "insert", "producers=1", "", 100),
			row("asynq", "burn-down", "concurrency=100", "", 100),
		}},
		{Task: Task{Kind: KindDurable, System: "redisstore"}, Durable: []DurableResult{
			row("redisstore", "insert", "producers=1", "", 200),
			row("redisstore", "burn-down", "workers=100", "", 300),
		}},
	}
	var found int
	for _, tg := range res.durableTargets() {
		if !strings.HasPrefix(tg.what, "redisstore") {
			continue
		}
		found++
		if !tg.known {
			t.Errorf("%s: not measured, though both rows exist", tg.what)
		}
	}
	if found != 2 {
		t.Errorf("%d redisstore targets, want 2", found)
	}
	for _, r := range res.durableRows() {
		if strings.Contains(r.Setting, ", ,") || strings.HasSuffix(r.Setting, ", ") {
			t.Errorf("setting %q has an empty part", r.Setting)
		}
	}
}

func TestJoinSetting(t *testing.T) {
	for _, c := range []struct{ a, b, want string }{
		{"", "", ""},
		{"workers=100", "", "workers=100"},
		{"", "persistence off", "persistence off"},
		{"workers=100", "WithCapacityCheck(false)", "workers=100, WithCapacityCheck(false)"},
	} {
		if got := joinSetting(c.a, c.b); got != c.want {
			t.Errorf("joinSetting(%q, %q) = %q, want %q", c.a, c.b, got, c.want)
		}
	}
}
