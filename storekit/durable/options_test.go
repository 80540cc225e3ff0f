package durable

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/queuekit/queue/queuetype"
	"github.com/queuekit/queue/storekit"
)

// TestDefaults: the options every durable store starts from.
func TestDefaults(t *testing.T) {
	o := Defaults("pgstore", 2*time.Second)
	if o.Pkg != "pgstore" || o.Codec != (JSONCodec{}) || o.MaxPayload != 1<<20 ||
		o.LeaseTTL != 30*time.Second || o.LeaderTTL != 10*time.Second || o.PollInterval != 2*time.Second ||
		o.JanitorInterval != time.Second || o.DeadRetention != 7*24*time.Hour || o.WorkerID == "" {
		t.Fatalf("Defaults = %+v", o)
	}
	if got := o.HeartbeatInterval(); got != 10*time.Second {
		t.Fatalf("HeartbeatInterval = %v, want a third of the lease TTL", got)
	}
}

// TestSetters: each option accepts its bound and refuses below it with a
// *queue.OptionError naming the store's option and the value.
func TestSetters(t *testing.T) {
	type setter struct {
		option string
		bad    func(o *Options) error
		good   func(o *Options) error
		check  func(o *Options) bool
		value  string
		reason string
	}
	for _, tc := range []setter{
		{"WithCodec", func(o *Options) error { return o.SetCodec(nil) }, func(o *Options) error { return o.SetCodec(JSONCodec{}) },
			func(o *Options) bool { return o.Codec == JSONCodec{} }, "<nil>", "must not be nil"},
		{"WithMaxPayload", func(o *Options) error { return o.SetMaxPayload(0) }, func(o *Options) error { return o.SetMaxPayload(1) },
			func(o *Options) bool { return o.MaxPayload == 1 }, "0", "must be >= 1"},
		{"WithLeaseTTL", func(o *Options) error { return o.SetLeaseTTL(99 * time.Millisecond) }, func(o *Options) error { return o.SetLeaseTTL(100 * time.Millisecond) },
			func(o *Options) bool { return o.LeaseTTL == 100*time.Millisecond }, "99ms", "must be >= 100ms"},
		{"WithLeaderTTL", func(o *Options) error { return o.SetLeaderTTL(0) }, func(o *Options) error { return o.SetLeaderTTL(100 * time.Millisecond) },
			func(o *Options) bool { return o.LeaderTTL == 100*time.Millisecond }, "0s", "must be >= 100ms"},
		{"WithPollInterval", func(o *Options) error { return o.SetPollInterval(time.Microsecond) }, func(o *Options) error { return o.SetPollInterval(time.Millisecond) },
			func(o *Options) bool { return o.PollInterval == time.Millisecond }, "1µs", "must be >= 1ms"},
		{"WithJanitorInterval", func(o *Options) error { return o.SetJanitorInterval(0) }, func(o *Options) error { return o.SetJanitorInterval(time.Millisecond) },
			func(o *Options) bool { return o.JanitorInterval == time.Millisecond }, "0s", "must be >= 1ms"},
		{"WithDeadRetention", func(o *Options) error { return o.SetDeadRetention(-time.Second) }, func(o *Options) error { return o.SetDeadRetention(0) },
			func(o *Options) bool { return o.DeadRetention == 0 }, "-1s", "must be >= 0s"},
		{"WithWorkerID", func(o *Options) error { return o.SetWorkerID(strings.Repeat("w", 201)) }, func(o *Options) error { return o.SetWorkerID(strings.Repeat("w", 200)) },
			func(o *Options) bool { return o.WorkerID == strings.Repeat("w", 200) }, `"` + strings.Repeat("w", 201) + `"`, "must be 1..200 bytes"},
		{"WithWorkerID", func(o *Options) error { return o.SetWorkerID("") }, func(o *Options) error { return o.SetWorkerID("a") },
			func(o *Options) bool { return o.WorkerID == "a" }, `""`, "must be 1..200 bytes"},
	} {
		t.Run(tc.option, func(t *testing.T) {
			o := Defaults("redisstore", time.Second)
			before := o
			err := tc.bad(&o)
			var oe *queuetype.OptionError
			if !errors.As(err, &oe) {
				t.Fatalf("bad value: %v, want a *queue.OptionError", err)
			}
			want := "queue: invalid option redisstore." + tc.option + "(" + tc.value + "): " + tc.reason
			if err.Error() != want {
				t.Fatalf("error %q, want %q", err, want)
			}
			if o != before {
				t.Fatalf("a refused value changed the options: %+v", o)
			}
			if err := tc.good(&o); err != nil || !tc.check(&o) {
				t.Fatalf("the bound itself: %v, options %+v", err, o)
			}
		})
	}
}

// TestApply: options apply in order, nil ones are skipped, and the first
// error stops the rest.
func TestApply(t *testing.T) {
	type opts struct{ trail []string }
	type opt func(*opts) error
	add := func(s string) opt { return func(o *opts) error { o.trail = append(o.trail, s); return nil } }
	bad := errors.New("bad")
	var o opts
	if err := Apply(&o, []opt{add("a"), nil, add("b")}); err != nil || strings.Join(o.trail, "") != "ab" {
		t.Fatalf("Apply = %v, trail %v", err, o.trail)
	}
	o = opts{}
	fail := func(*opts) error { return bad }
	if err := Apply(&o, []opt{add("a"), fail, add("b")}); !errors.Is(err, bad) || strings.Join(o.trail, "") != "a" {
		t.Fatalf("Apply = %v, trail %v; want the error after a", err, o.trail)
	}
}

// TestBind: the queue name rule and the defaults of a hand-built
// configuration.
func TestBind(t *testing.T) {
	cfg := storekit.Config{Name: "mail.outbox:v2-b_1", Priorities: []queuetype.Priority{{Name: "normal", Weight: 1}}}
	got, err := Bind("pgstore", cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got.Logger == nil || got.Clock == nil || got.Report == nil {
		t.Fatalf("Bind left a default unset: %+v", got)
	}
	got.Report(queuetype.Event{}) // does nothing, does not panic
	for _, name := range []string{"", "a b", "-a", "bad{name}", strings.Repeat("a", 64), "päckchen"} {
		cfg.Name = name
		_, err := Bind("redisstore", cfg)
		want := `redisstore: queue name "` + name + `" is not valid: ` +
			"use 1 to 63 letters, digits, '_', '.', ':' or '-', starting with a letter, digit or '_'"
		if err == nil || err.Error() != want {
			t.Errorf("Bind(%q) = %v, want %q", name, err, want)
		}
	}
	cfg.Name, cfg.Priorities = "q", nil
	if _, err := Bind("pgstore", cfg); err == nil || err.Error() != "pgstore: no priorities" {
		t.Errorf("Bind without priorities = %v", err)
	}
}

// TestNewWorkerID: host-pid-random, different each time.
func TestNewWorkerID(t *testing.T) {
	a, b := NewWorkerID(), NewWorkerID()
	if a == b {
		t.Fatalf("two worker IDs are both %q", a)
	}
	if parts := strings.Split(a, "-"); len(parts) < 3 || len(parts[len(parts)-1]) != 8 || len(a) > MaxWorkerID {
		t.Fatalf("worker ID %q is not host-pid-random", a)
	}
}
