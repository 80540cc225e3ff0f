package redisstore

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue/storekit/durable"
)

// TestDefaultsShowTheirValues: each exported Default… constant has its
// own doc comment and a value go doc can show, written here rather than
// naming a constant of an internal package, and agrees with the shared
// durable defaults.
func TestDefaultsShowTheirValues(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "options.go", nil, parser.ParseComments)
	require.NoError(t, err)
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
				require.True(t, vs.Doc != nil || vs.Comment != nil, "%s has no doc comment of its own", name.Name)
				require.NotNil(t, vs.Type, "%s is untyped: give it the type its option takes", name.Name)
				ast.Inspect(vs.Values[i], func(x ast.Node) bool {
					if sel, ok := x.(*ast.SelectorExpr); ok {
						if id, ok := sel.X.(*ast.Ident); ok && id.Name == "durable" {
							t.Errorf("%s = durable.%s: go doc cannot show an internal package's value", name.Name, sel.Sel.Name)
						}
					}
					return true
				})
			}
		}
	}
	require.NotZero(t, n)
	require.EqualValues(t, durable.DefaultMaxPayload, DefaultMaxPayload)
	require.EqualValues(t, durable.DefaultLeaseTTL, DefaultLeaseTTL)
	require.EqualValues(t, durable.DefaultLeaderTTL, DefaultLeaderTTL)
	require.EqualValues(t, durable.DefaultJanitorInterval, DefaultJanitorInterval)
	require.EqualValues(t, durable.DefaultDeadRetention, DefaultDeadRetention)
}
