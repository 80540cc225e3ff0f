package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// sandbox is a user's machine as far as our modules go: a module proxy
// made from the work tree, a fresh module cache, and go commands that
// see neither go.work nor the repository.
type sandbox struct {
	ws    *workspace
	tmp   string // everything of the sandbox is under it
	proxy string // the GOPROXY directory of our modules
	env   []string
}

// newSandbox builds the proxy in a new temporary directory. Our modules
// come from that proxy and are exempt from the checksum database, which
// has never seen them (GONOSUMDB, not GOPRIVATE: GOPRIVATE would also
// bypass the proxy). Third-party modules come from the existing module
// cache, itself a valid file:// proxy, and then from the configured
// GOPROXY, and are checked against go.sum or the checksum database as a
// user's would be. Builds use -trimpath, so that the build cache, keyed
// by the sources and not by the sandbox's module cache path, serves the
// third-party packages from one run to the next.
func newSandbox(ws *workspace) (*sandbox, error) {
	tmp, err := os.MkdirTemp("", "releasecheck-")
	if err != nil {
		return nil, err
	}
	s := &sandbox{ws: ws, tmp: tmp, proxy: filepath.Join(tmp, "proxy")}
	if err := buildProxy(ws, s.proxy); err != nil {
		s.close()
		return nil, err
	}
	cache, err := goEnv("GOMODCACHE")
	if err != nil {
		s.close()
		return nil, err
	}
	upstream, err := goEnv("GOPROXY")
	if err != nil {
		s.close()
		return nil, err
	}
	goproxy := "file://" + filepath.ToSlash(s.proxy) + ",file://" + filepath.ToSlash(filepath.Join(cache, "cache", "download"))
	if upstream != "" && upstream != "off" {
		goproxy += "," + upstream
	}
	set := map[string]string{
		"GOWORK":      "off",
		"GOFLAGS":     "-trimpath",
		"GOPROXY":     goproxy,
		"GONOSUMDB":   "github.com/queuekit",
		"GOPRIVATE":   "",
		"GONOPROXY":   "",
		"GOMODCACHE":  filepath.Join(tmp, "modcache"),
		"GOBIN":       filepath.Join(tmp, "bin"),
		"GOTOOLCHAIN": "local",
	}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := set[k]; !ok {
			s.env = append(s.env, kv)
		}
	}
	for k, v := range set {
		s.env = append(s.env, k+"="+v)
	}
	return s, nil
}

// close removes the sandbox; the module cache's files are read-only, so
// go clean empties it first.
func (s *sandbox) close() {
	if s.env != nil {
		_, _ = s.run(s.tmp, nil, "go", "clean", "-modcache")
	}
	_ = os.RemoveAll(s.tmp)
}

// dir makes a new directory in the sandbox.
func (s *sandbox) dir(name string) (string, error) {
	d := filepath.Join(s.tmp, name)
	return d, os.MkdirAll(d, 0o755)
}

// goCmd runs the go command in dir with the sandbox's environment and
// returns its output, stdout and stderr together.
func (s *sandbox) goCmd(dir string, args ...string) (string, error) {
	return s.run(dir, nil, "go", args...)
}

// modGo is goCmd for commands that may resolve missing modules, as a
// user's go build does with -mod=mod.
func (s *sandbox) modGo(dir string, args ...string) (string, error) {
	return s.run(dir, []string{"GOFLAGS=-mod=mod -trimpath"}, "go", args...)
}

func (s *sandbox) run(dir string, extraEnv []string, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(append([]string(nil), s.env...), extraEnv...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	return out.String(), err
}

func goEnv(name string) (string, error) {
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		return "", fmt.Errorf("go env %s: %w", name, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// tail returns the last n lines of out, indented, for a FAIL line.
func tail(out string, n int) string {
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "    " + strings.Join(lines, "\n    ")
}
