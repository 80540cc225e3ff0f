package storetest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strings"
	"testing"
)

// CheckDefaults checks the exported Default… constants that a store
// declares in file (a path relative to the test's package, such as
// "options.go"): each has a doc comment of its own, a type (the type its
// option takes), and a value written out (units of package time aside)
// rather than naming another package's constant, whose value go doc
// would not show. It fails the
// test when file declares none.
func CheckDefaults(t testing.TB, file string) {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ParseComments)
	if err != nil {
		t.Fatalf("storetest.CheckDefaults: %v", err)
	}
	n := 0
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if !strings.HasPrefix(name.Name, "Default") {
					continue
				}
				n++
				if vs.Doc == nil && vs.Comment == nil {
					t.Errorf("%s has no doc comment of its own", name.Name)
				}
				if vs.Type == nil {
					t.Errorf("%s is untyped: give it the type its option takes", name.Name)
				}
				if i >= len(vs.Values) {
					continue
				}
				ast.Inspect(vs.Values[i], func(x ast.Node) bool {
					if sel, ok := x.(*ast.SelectorExpr); ok {
						if id, ok := sel.X.(*ast.Ident); ok && id.Name != "time" { // time.Second is a unit
							t.Errorf("%s = %s.%s: go doc shows the name, not the value", name.Name, id.Name, sel.Sel.Name)
						}
					}
					return true
				})
			}
		}
	}
	if n == 0 {
		t.Errorf("storetest.CheckDefaults: %s declares no Default… constant", file)
	}
}
