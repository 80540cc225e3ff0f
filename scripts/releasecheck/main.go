// Command releasecheck rehearses a release of the repository's modules
// and guards their exported API. It runs outside the workspace (its own
// module, GOWORK=off) and takes the repository root with -repo.
//
//	releasecheck proxy -dir D       write a GOPROXY directory holding every
//	                                module of go.work at v1.0.0 (and the
//	                                core at v1.1.0), made from the work tree
//	releasecheck tidy               go mod tidy -diff for every module,
//	                                against such a proxy
//	releasecheck rehearse           what a user of v1.0.0 does: go get a
//	                                store, run a job on it, go install
//	                                queuectl, upgrade the core a minor
//	releasecheck api [-update]      compare the exported API of the
//	                                published modules with api/, or rewrite
//	                                api/ from the work tree
//	releasecheck reachable          exit 0 if PostgreSQL and Redis accept
//	                                connections
//
// scripts/release-check.sh and scripts/api-check.sh drive it; see
// docs/RELEASING.md.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

const usage = `usage: releasecheck [-repo DIR] <command> [flags]

commands:
  proxy -dir D      write a module proxy directory made from the work tree
  tidy              check that every go.mod and go.sum is tidy
  rehearse          go get, run, go install and upgrade as a user would
  api [-update]     check the exported API against api/ (or rewrite api/)
  reachable         exit 0 if PostgreSQL and Redis accept connections
`

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("releasecheck", flag.ContinueOnError)
	repo := fs.String("repo", ".", "the repository root (the directory of go.work)")
	fs.Usage = func() { fmt.Fprint(os.Stderr, usage) }
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	root, err := filepath.Abs(*repo)
	if err != nil {
		fmt.Fprintln(os.Stderr, "releasecheck:", err)
		return 1
	}
	ws, err := loadWorkspace(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "releasecheck:", err)
		return 1
	}
	cmd, rest := fs.Arg(0), fs.Args()[1:]
	switch cmd {
	case "proxy":
		err = cmdProxy(ws, rest)
	case "tidy":
		err = cmdTidy(ws, rest)
	case "rehearse":
		err = cmdRehearse(ws, rest)
	case "api":
		err = cmdAPI(ws, rest)
	case "reachable":
		err = cmdReachable(rest)
	default:
		fmt.Fprintf(os.Stderr, "releasecheck: unknown command %q\n%s", cmd, usage)
		return 2
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "releasecheck:", err)
		return 1
	}
	return 0
}
