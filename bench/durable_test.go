package bench

import (
	"net"
	"os/exec"
	"testing"
	"time"
)

// TestDurableSmoke runs every registered durable contender with tiny
// counts against the local PostgreSQL and Redis, and skips when either is
// not listening on 127.0.0.1.
func TestDurableSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("durable smoke skipped in -short mode")
	}
	cfg := DefaultDurable()
	for _, addr := range []string{"127.0.0.1:5432", cfg.RedisAddr} {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			t.Skipf("no server at %s: %v", addr, err)
		}
		c.Close()
	}
	if path, err := exec.LookPath(cfg.RedisServer); err == nil {
		cfg.SpawnRedis, cfg.RedisServer = true, path
	}
	cfg.InsertN, cfg.BatchN, cfg.BurnN = 50, 200, 200
	cfg.BurnLimit = 5 * time.Second
	for _, s := range DurableSystems() {
		t.Run(s.Name, func(t *testing.T) {
			rows, err := RunDurable(s.Name, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) == 0 {
				t.Fatal("no results")
			}
			for _, r := range rows {
				t.Logf("%s %s %s: %d jobs in %s (%s)", r.System, r.Case, r.Setting, r.Jobs, dur(r.Elapsed), rate(r.Rate))
				if r.Jobs == 0 || r.Rate <= 0 {
					t.Errorf("%s %s: no jobs measured", r.Case, r.Setting)
				}
			}
		})
	}
}
