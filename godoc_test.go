package queue_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// TestExportedNamesDocumented fails on an exported name of package queue,
// queuetype, storekit (and its durable and memstore), queuetest, storetest (and fleettest, storebench), admin, jobkinds or dashboard that has no doc comment: a function, a method of an
// exported type, a type, a constant, a variable, a field of an exported
// struct or a method of an exported interface. A trailing line comment
// counts for fields, interface methods and grouped constants; a group's
// comment counts for the names declared in it.
func TestExportedNamesDocumented(t *testing.T) {
	for _, dir := range []string{".", "queuetype", "storekit", "storekit/durable", "storekit/memstore", "queuetest", "storetest", "storetest/fleettest", "storetest/storebench", "admin", "internal/jobkinds", "dashboard"} {
		for _, name := range undocumented(t, dir) {
			t.Errorf("%s has no doc comment", name)
		}
	}
}

func undocumented(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var missing []string
	report := func(pos token.Pos, what string) {
		missing = append(missing, fset.Position(pos).String()+": "+what)
	}
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, path, src, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() || d.Doc != nil {
					continue
				}
				if d.Recv == nil {
					report(d.Pos(), "func "+d.Name.Name)
				} else if recv := recvName(d.Recv.List[0].Type); ast.IsExported(recv) {
					report(d.Pos(), "method "+recv+"."+d.Name.Name)
				}
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.TypeSpec:
						if !s.Name.IsExported() {
							continue
						}
						if s.Doc == nil && s.Comment == nil && d.Doc == nil {
							report(s.Pos(), "type "+s.Name.Name)
						}
						checkMembers(s, report)
					case *ast.ValueSpec:
						if s.Doc != nil || s.Comment != nil || d.Doc != nil {
							continue
						}
						for _, n := range s.Names {
							if n.IsExported() {
								report(n.Pos(), d.Tok.String()+" "+n.Name)
							}
						}
					}
				}
			}
		}
	}
	sort.Strings(missing)
	return missing
}

// checkMembers reports the exported fields of a struct type and the
// exported methods of an interface type that have no comment.
func checkMembers(s *ast.TypeSpec, report func(token.Pos, string)) {
	var fields *ast.FieldList
	kind := "field "
	switch typ := s.Type.(type) {
	case *ast.StructType:
		fields = typ.Fields
	case *ast.InterfaceType:
		fields, kind = typ.Methods, "interface method "
	default:
		return
	}
	for _, field := range fields.List {
		if field.Doc != nil || field.Comment != nil {
			continue
		}
		for _, n := range field.Names {
			if n.IsExported() {
				report(n.Pos(), kind+s.Name.Name+"."+n.Name)
			}
		}
	}
}

// recvName is the name of a method receiver's type: T, *T, T[P] or *T[P].
func recvName(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}
