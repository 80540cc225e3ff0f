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
			row("redisstore", "batch insert", "EnqueueMany", "", 600),
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
		if strings.Contains(tg.what, "one at a time") && (!tg.met || !strings.HasPrefix(tg.measured, "2.00×")) {
			t.Errorf("%s: %q met=%v, want 2.00× (200 vs 100) and met", tg.what, tg.measured, tg.met)
		}
		if strings.Contains(tg.what, "EnqueueMany") && (!tg.met || !strings.HasPrefix(tg.measured, "6.00×")) {
			t.Errorf("%s: %q met=%v, want 6.00× (600 vs 100) and met", tg.what, tg.measured, tg.met)
		}
	}
	if found != 3 {
		t.Errorf("%d redisstore targets, want 3", found)
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

// TestMergeTakesLaterVersions checks that a merged run's module versions
// replace the earlier run's in the report, and that the merged line says
// which of the reported ones changed: a durable re-run after a river
// upgrade was reported with the old river version.
func TestMergeTakesLaterVersions(t *testing.T) {
	const river = "github.com/riverqueue/river"
	first := Results{Meta: Meta{Versions: map[string]string{river: "v0.44.1", "github.com/alitto/pond/v2": "v2.7.1", "golang.org/x/sys": "v0.47.0"}}}
	later := Results{Meta: Meta{Command: "qbench -durable", Versions: map[string]string{river: "v0.51.2", "github.com/alitto/pond/v2": "v2.7.1", "golang.org/x/sys": "v0.48.0"}},
		Config: Config{Durable: &DurableConfig{}}}
	first.Merge(&later)
	if got := first.Meta.Versions[river]; got != "v0.51.2" {
		t.Errorf("river version after merge: %q, want v0.51.2", got)
	}
	if !strings.Contains(first.Markdown(), "| "+river+" | v0.51.2 |") {
		t.Error("the report's versions table does not show the merged run's river")
	}
	if n := len(first.Meta.Merged); n != 1 || !strings.Contains(first.Meta.Merged[0], river+" v0.44.1 → v0.51.2") ||
		strings.Contains(first.Meta.Merged[0], "pond") || strings.Contains(first.Meta.Merged[0], "x/sys") {
		t.Errorf("merged line does not name exactly the changed version: %q", first.Meta.Merged)
	}
}

// TestSQLiteTargetsFindRows builds the SQLite rows the way a run does
// (sqlitestore's options, then the synchronous setting appended) and
// checks that each issue #34 target finds its rows and computes its ratio.
func TestSQLiteTargetsFindRows(t *testing.T) {
	mode := "synchronous FULL"
	row := func(system, kase, setting, options string, rate float64) DurableResult {
		return DurableResult{System: system, Case: kase, Setting: joinSetting(joinSetting(setting, options), mode), Jobs: 1, Rate: rate}
	}
	const opts = "WithCapacityCheck(false)"
	res := Results{Config: Config{Durable: &DurableConfig{BurnWorkers: []int{100}, SQLiteWorkers: 100, BatchN: 100000, BatchSize: 1000}}}
	res.Durable = []TaskResult{
		{Task: Task{Kind: KindDurable, System: "pgstore"}, Durable: []DurableResult{
			{System: "pgstore", Case: "burn-down", Setting: "workers=100, " + opts, Jobs: 1, Rate: 2000},
		}},
		{Task: Task{Kind: KindDurable, System: "river-sqlite"}, Durable: []DurableResult{
			row("river-sqlite", "insert", "producers=1", "", 100),
			row("river-sqlite", "burn-down", "workers=100, cooldown 2ms / poll 20ms (river's benchmark settings)", "", 100),
		}},
		{Task: Task{Kind: KindDurable, System: "goqite"}, Durable: []DurableResult{
			row("goqite", "burn-down", "goroutines=100", "", 500),
		}},
		{Task: Task{Kind: KindDurable, System: "sqlitestore"}, Durable: []DurableResult{
			row("sqlitestore", "insert", "producers=10", opts, 900),
			row("sqlitestore", "insert", "producers=1", opts, 150),
			row("sqlitestore", "burn-down", "workers=100", opts, 400),
			row("sqlitestore", "batch insert", "EnqueueMany, batches of 1 000", opts, 120000),
		}},
	}
	want := map[string]string{
		"sqlitestore burn-down ≥ 3× river-sqlite":        "4.00×",
		"sqlitestore burn-down ≥ goqite":                 "0.80×",
		"sqlitestore burn-down ≥ 0.5× pgstore":           "0.20×",
		"sqlitestore one producer, one job per call ≥ 2": "1.50×",
		"sqlitestore EnqueueMany, batches of 1 000":      "120.0 k/s",
	}
	met := map[string]bool{"sqlitestore burn-down ≥ 3× river-sqlite": true, "sqlitestore EnqueueMany, batches of 1 000": true}
	found := 0
	for _, tg := range res.durableTargets() {
		for prefix, measured := range want {
			if !strings.HasPrefix(tg.what, prefix) {
				continue
			}
			found++
			if !tg.known || !strings.HasPrefix(tg.measured, measured) || tg.met != met[prefix] {
				t.Errorf("%s: known=%v measured=%q met=%v, want %s met=%v", tg.what, tg.known, tg.measured, tg.met, measured, met[prefix])
			}
		}
	}
	if found != len(want) {
		t.Errorf("%d SQLite targets found, want %d", found, len(want))
	}
	if !strings.Contains(res.Markdown(), "SQLite: every system on new files") {
		t.Error("the report does not describe the SQLite setup")
	}
}
