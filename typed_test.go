package queue_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoJobTypeAssertions fails on a type assertion to Job[…] or *Job[…]
// in the root package's non-test code: the engine holds jobs typed (the
// jobs parked for a target's slot included), so a job held as any, and
// checked only at run time, does not creep back.
func TestNoJobTypeAssertions(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if ta, ok := n.(*ast.TypeAssertExpr); ok && ta.Type != nil && isJobType(ta.Type) {
				t.Errorf("%s: type assertion to a Job", fset.Position(ta.Pos()))
			}
			return true
		})
	}
}

// isJobType reports whether e spells Job[…] or *Job[…].
func isJobType(e ast.Expr) bool {
	if s, ok := e.(*ast.StarExpr); ok {
		e = s.X
	}
	if ix, ok := e.(*ast.IndexExpr); ok {
		id, ok := ix.X.(*ast.Ident)
		return ok && id.Name == "Job"
	}
	return false
}
