package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// cmdTidy runs go mod tidy -diff in every module, outside the workspace,
// against the sandbox's proxy: the go.mod files require v1.0.0 of their
// siblings, which only that proxy serves until the tags exist. go.mod
// must match exactly. go.sum is compared without the lines of our own
// modules: their hashes change with every commit, and the repository
// builds in workspace mode, which needs none of them.
//
// With -w it tidies instead: go mod tidy in every module, then the lines
// of our own modules taken out of each go.sum.
func cmdTidy(ws *workspace, args []string) error {
	fs := flag.NewFlagSet("tidy", flag.ContinueOnError)
	write := fs.Bool("w", false, "tidy the go.mod and go.sum files instead of checking them")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("tidy: unexpected argument %q", fs.Arg(0))
	}
	s, err := newSandbox(ws)
	if err != nil {
		return err
	}
	defer s.close()
	if *write {
		return tidyWrite(s)
	}
	bad := 0
	for _, m := range ws.Modules {
		rel, _ := filepath.Rel(ws.Root, m.Dir)
		out, err := s.goCmd(m.Dir, "mod", "tidy", "-diff")
		if err == nil {
			fmt.Printf("PASS tidy %s: go.mod and go.sum are tidy\n", rel)
			continue
		}
		diff, ok := significantDiff(out)
		switch {
		case !ok:
			fmt.Printf("FAIL tidy %s: %v\n%s\n", rel, err, tail(out, 10))
			bad++
		case diff != "":
			fmt.Printf("FAIL tidy %s: go.mod or go.sum is not tidy (scripts/release-check.sh tidy -w tidies them); go mod tidy would change:\n%s\n", rel, diff)
			bad++
		default:
			fmt.Printf("PASS tidy %s: go.mod and go.sum are tidy (but for the hashes of our own modules)\n", rel)
		}
	}
	if bad > 0 {
		return fmt.Errorf("tidy: %d of %d modules are not tidy", bad, len(ws.Modules))
	}
	return nil
}

// significantDiff reads the output of go mod tidy -diff and returns its
// changed lines but those that add or remove a go.sum line of one of
// our modules. ok is false if out is not a diff (tidy failed).
func significantDiff(out string) (diff string, ok bool) {
	var file string
	var kept []string
	for line := range strings.Lines(out) {
		line = strings.TrimRight(line, "\n")
		switch {
		case strings.HasPrefix(line, "+++ "):
			file = filepath.Base(strings.TrimPrefix(line, "+++ "))
			ok = true
		case strings.HasPrefix(line, "--- "), strings.HasPrefix(line, "diff "), strings.HasPrefix(line, "@@"):
		case strings.HasPrefix(line, "+"), strings.HasPrefix(line, "-"):
			if file == "go.sum" && ourSum(line[1:]) {
				continue
			}
			kept = append(kept, "    "+file+": "+line)
		}
	}
	return strings.Join(kept, "\n"), ok
}

// ourSum reports whether a go.sum line is one of our modules'.
func ourSum(line string) bool {
	mod, _, _ := strings.Cut(line, " ")
	return mod == corePath || strings.HasPrefix(mod, corePath+"/")
}

// tidyWrite runs go mod tidy in every module and drops our modules'
// lines from the go.sum files it writes.
func tidyWrite(s *sandbox) error {
	for _, m := range s.ws.Modules {
		rel, _ := filepath.Rel(s.ws.Root, m.Dir)
		if out, err := s.goCmd(m.Dir, "mod", "tidy"); err != nil {
			return fmt.Errorf("%s: %w\n%s", rel, err, tail(out, 10))
		}
		name := filepath.Join(m.Dir, "go.sum")
		data, err := os.ReadFile(name)
		if os.IsNotExist(err) {
			continue
		} else if err != nil {
			return err
		}
		var kept strings.Builder
		for line := range strings.Lines(string(data)) {
			if !ourSum(line) {
				kept.WriteString(line)
			}
		}
		if err := os.WriteFile(name, []byte(kept.String()), 0o644); err != nil {
			return err
		}
		fmt.Printf("tidied %s\n", rel)
	}
	return nil
}
