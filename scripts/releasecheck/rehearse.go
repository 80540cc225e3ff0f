package main

import (
	"embed"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

//go:embed testdata/consumer/*.go
var consumers embed.FS

// step is one thing a user does, with what it proves.
type step struct {
	name string
	run  func(s *sandbox) (string, error) // what it did, for the PASS line
}

// cmdRehearse does what a user of the released modules does, each in a
// new module outside the repository, and prints a PASS or FAIL line
// for each step.
func cmdRehearse(ws *workspace, args []string) error {
	fs := flag.NewFlagSet("rehearse", flag.ContinueOnError)
	if err := fs.Parse(args); err != nil {
		return err
	}
	start := time.Now()
	s, err := newSandbox(ws)
	if err != nil {
		fmt.Printf("FAIL proxy: %v\n", err)
		return err
	}
	defer s.close()
	fmt.Printf("PASS proxy: %d modules at %s and the core at %s, zipped from the work tree (%.1fs)\n",
		len(ws.Modules), releaseVersion, nextMinor, time.Since(start).Seconds())
	pgQueue := fmt.Sprintf("releasecheck-%d-%d", os.Getpid(), time.Now().UnixNano())
	steps := []step{
		{"memory", func(s *sandbox) (string, error) { return consume(s, "memory", corePath, "") }},
		{"pgstore", func(s *sandbox) (string, error) { return consume(s, "pgstore", corePath+"/pgstore", pgQueue) }},
		{"redisstore", func(s *sandbox) (string, error) {
			return consume(s, "redisstore", corePath+"/redisstore", fmt.Sprintf("releasecheck-%d", time.Now().UnixNano()))
		}},
		{"sqlitestore", func(s *sandbox) (string, error) { return consume(s, "sqlitestore", corePath+"/sqlitestore", "") }},
		{"otelqueue", func(s *sandbox) (string, error) { return consume(s, "otelqueue", corePath+"/otelqueue", "") }},
		{"queuectl", func(s *sandbox) (string, error) { return installQueuectl(s, pgQueue) }},
		{"upgrade", upgradeCore},
	}
	failed := 0
	for _, st := range steps {
		t := time.Now()
		did, err := st.run(s)
		if err != nil {
			failed++
			fmt.Printf("FAIL %s: %s\n", st.name, did)
			fmt.Println(tail(err.Error(), 15))
			continue
		}
		fmt.Printf("PASS %s: %s (%.1fs)\n", st.name, did, time.Since(t).Seconds())
	}
	if failed > 0 {
		return fmt.Errorf("rehearse: %d of %d steps failed", failed, len(steps))
	}
	return nil
}

// fail wraps a command's error with its output.
func fail(out string, err error) error {
	return fmt.Errorf("%v\n%s", err, strings.TrimRight(out, "\n"))
}

// newConsumer makes a new module named example.com/<name> in the
// sandbox, with the consumer program of that name if there is one.
func newConsumer(s *sandbox, name string) (string, error) {
	dir, err := s.dir("consumer-" + name)
	if err != nil {
		return "", err
	}
	if out, err := s.goCmd(dir, "mod", "init", "example.com/"+name); err != nil {
		return "", fail(out, err)
	}
	return dir, nil
}

// writeProgram puts the consumer program of that name in dir.
func writeProgram(dir, name string) error {
	src, err := consumers.ReadFile("testdata/consumer/" + name + ".go")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "main.go"), src, 0o644)
}

// requires returns the version of mod that the module in dir selects.
func requires(s *sandbox, dir, mod string) (string, error) {
	out, err := s.goCmd(dir, "list", "-m", "-f", "{{.Version}}", mod)
	if err != nil {
		return "", fail(out, err)
	}
	return strings.TrimSpace(out), nil
}

// consume: go get mod@v1.0.0 alone in a new module, check that it
// brought the core at v1.0.0, then build and run the program of that
// name, which exits 0 only if its job ran.
func consume(s *sandbox, name, mod, queueName string) (string, error) {
	did := fmt.Sprintf("go get %s@%s", mod, releaseVersion)
	dir, err := newConsumer(s, name)
	if err != nil {
		return did, err
	}
	if out, err := s.goCmd(dir, "get", mod+"@"+releaseVersion); err != nil {
		return did, fail(out, err)
	}
	if v, err := requires(s, dir, corePath); err != nil || v != releaseVersion {
		return did + " did not bring " + corePath + "@" + releaseVersion, fmt.Errorf("selected %q: %v", v, err)
	}
	if err := writeProgram(dir, name); err != nil {
		return did, err
	}
	if out, err := s.modGo(dir, "mod", "tidy"); err != nil {
		return did + ", go mod tidy", fail(out, err)
	}
	bin := filepath.Join(dir, name)
	if out, err := s.goCmd(dir, "build", "-o", bin, "."); err != nil {
		return did + ", go build", fail(out, err)
	}
	var args []string
	if queueName != "" {
		args = append(args, queueName)
	}
	out, err := s.run(dir, nil, bin, args...)
	if err != nil || !strings.Contains(out, "job ran: "+name) {
		return did + ", build, run a job", fail(out, err)
	}
	return fmt.Sprintf("%s (brings %s@%s), go build, run: %s", did, corePath, releaseVersion, strings.TrimSpace(out)), nil
}

// installQueuectl: go install queuectl@v1.0.0, then run its usage and a
// stats command on the queue the pgstore step ran its job in.
func installQueuectl(s *sandbox, pgQueue string) (string, error) {
	did := fmt.Sprintf("go install %s/queuectl@%s", corePath, releaseVersion)
	if out, err := s.goCmd(s.tmp, "install", corePath+"/queuectl@"+releaseVersion); err != nil {
		return did, fail(out, err)
	}
	bin := filepath.Join(s.tmp, "bin", "queuectl")
	if out, err := s.run(s.tmp, nil, bin, "-h"); err != nil || !strings.Contains(out, "Usage") && !strings.Contains(out, "usage") {
		return did + ", queuectl -h", fail(out, err)
	}
	out, err := s.run(s.tmp, nil, bin, "--pg", os.Getenv("QUEUE_PG_URL"), "--queue", pgQueue, "stats", "-o", "json")
	if err != nil {
		return did + ", queuectl stats", fail(out, err)
	}
	// The pgstore step's one job, done.
	var stats struct {
		Counts map[string]int `json:"counts"`
	}
	if err := json.Unmarshal([]byte(out), &stats); err != nil || stats.Counts["done"] != 1 {
		if err == nil {
			err = fmt.Errorf("done = %d, want 1", stats.Counts["done"])
		}
		return did + ", queuectl stats shows the pgstore step's job done", fail(out, err)
	}
	return fmt.Sprintf("%s, queuectl -h, queuectl --pg $QUEUE_PG_URL --queue %s stats -o json: done=%d", did, pgQueue, stats.Counts["done"]), nil
}

// upgradeCore: a module with both stores at v1.0.0 takes the core at
// v1.1.0; the stores must still build and vet.
func upgradeCore(s *sandbox) (string, error) {
	did := fmt.Sprintf("pgstore and redisstore at %s with %s@%s", releaseVersion, corePath, nextMinor)
	dir, err := newConsumer(s, "upgrade")
	if err != nil {
		return did, err
	}
	if out, err := s.goCmd(dir, "get", corePath+"/pgstore@"+releaseVersion, corePath+"/redisstore@"+releaseVersion); err != nil {
		return did, fail(out, err)
	}
	if out, err := s.goCmd(dir, "get", corePath+"@"+nextMinor); err != nil {
		return did, fail(out, err)
	}
	if err := writeProgram(dir, "upgrade"); err != nil {
		return did, err
	}
	if out, err := s.modGo(dir, "mod", "tidy"); err != nil {
		return did + ", go mod tidy", fail(out, err)
	}
	for mod, want := range map[string]string{corePath: nextMinor, corePath + "/pgstore": releaseVersion, corePath + "/redisstore": releaseVersion} {
		if v, err := requires(s, dir, mod); err != nil || v != want {
			return did + ": " + mod + " is not at " + want, fmt.Errorf("selected %q: %v", v, err)
		}
	}
	pkgs := []string{"./...", corePath + "/...", corePath + "/pgstore/...", corePath + "/redisstore/..."}
	if out, err := s.modGo(dir, append([]string{"build"}, pkgs...)...); err != nil {
		return did + ", go build", fail(out, err)
	}
	if out, err := s.goCmd(dir, "vet", "./..."); err != nil {
		return did + ", go vet", fail(out, err)
	}
	return did + ": go build of every package of the three modules and of a program using both stores, go vet of the program", nil
}
