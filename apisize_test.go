package queue

import (
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// The root package is the user's API: store-author names live in
// storekit, shared types in queuetype. These bounds keep it that way; a
// change that needs more names should first ask whether they belong in
// the root (docs/RELEASING.md, "The root package").
const (
	// 95, not 90: issue #36's middleware API (JobInfo, Middleware,
	// WithMiddleware, WithEnqueueHook, Logger) is the host's, and so the
	// root's; the five names would not read better in a sub-package.
	// 276, not 270: the claim gate (SetConcurrency, WithClaimGate,
	// ErrInvalidConcurrency, Stats.Concurrency, Stats.AtGate,
	// Counts.GateErrors) adds six members, two of them names (93 → 95).
	maxRootNames   = 95  // exported top-level names
	maxRootMembers = 276 // the same, plus exported methods and fields (alias fields counted)
)

// TestRootAPISize counts the root package's exported API over its
// non-test files with go/types: top-level names, and the methods and
// fields of each exported type (for an alias, of the type it names).
func TestRootAPISize(t *testing.T) {
	if testing.Short() {
		t.Skip("type-checks the package from export data")
	}
	names, members := rootAPI(t)
	t.Logf("root package: %d exported names, %d with methods and fields", len(names), members)
	if len(names) > maxRootNames || members > maxRootMembers {
		t.Errorf("root package exports %d names (limit %d) and %d with methods and fields (limit %d):\n%s",
			len(names), maxRootNames, members, maxRootMembers, strings.Join(names, " "))
	}
}

func rootAPI(t *testing.T) ([]string, int) {
	t.Helper()
	out, err := exec.Command("go", "list", "-export", "-deps", "-f", "{{.ImportPath}}\t{{.Export}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -export: %v", err)
	}
	exports := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if p, f, ok := strings.Cut(l, "\t"); ok {
			exports[p] = f
		}
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		return os.Open(exports[path])
	})
	matches, _ := filepath.Glob("*.go")
	var files []*ast.File
	for _, m := range matches {
		if strings.HasSuffix(m, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, m, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	conf := types.Config{Importer: imp}
	pkg, err := conf.Check("github.com/queuekit/queue", fset, files, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	members := 0
	for _, n := range pkg.Scope().Names() {
		o := pkg.Scope().Lookup(n)
		if !o.Exported() {
			continue
		}
		names = append(names, n)
		members++
		tn, ok := o.(*types.TypeName)
		if !ok {
			continue
		}
		typ := types.Unalias(tn.Type())
		seen := map[string]bool{}
		ms := types.NewMethodSet(types.NewPointer(typ))
		if types.IsInterface(typ) {
			ms = types.NewMethodSet(typ)
		}
		for i := range ms.Len() {
			if m := ms.At(i).Obj(); m.Exported() && !seen[m.Name()] {
				seen[m.Name()] = true
				members++
			}
		}
		if st, ok := typ.Underlying().(*types.Struct); ok {
			for i := range st.NumFields() {
				if f := st.Field(i); f.Exported() && !seen[f.Name()] {
					seen[f.Name()] = true
					members++
				}
			}
		}
	}
	sort.Strings(names)
	return names, members
}
