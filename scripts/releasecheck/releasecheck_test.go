package main

import (
	"archive/zip"
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/mod/module"
)

func TestSignificantDiffIgnoresOurGoSumLines(t *testing.T) {
	out := `diff current/go.mod tidy/go.mod
--- current/go.mod
+++ tidy/go.mod
diff current/go.sum tidy/go.sum
--- current/go.sum
+++ tidy/go.sum
@@ -1,3 +1,5 @@
+github.com/queuekit/queue v1.0.0 h1:abc=
+github.com/queuekit/queue/pgstore v1.0.0/go.mod h1:def=
 github.com/stretchr/testify v1.11.1 h1:x=
`
	diff, ok := significantDiff(out)
	if !ok || diff != "" {
		t.Fatalf("significantDiff = %q, %v; want \"\", true", diff, ok)
	}
}

func TestSignificantDiffKeepsOtherChanges(t *testing.T) {
	out := `diff current/go.mod tidy/go.mod
--- current/go.mod
+++ tidy/go.mod
@@ -5,1 +5,1 @@
-	github.com/queuekit/queue v0.0.0
+	github.com/queuekit/queue v1.0.0
diff current/go.sum tidy/go.sum
--- current/go.sum
+++ tidy/go.sum
@@ -1,1 +1,1 @@
-github.com/queuekit/queuex v1.0.0 h1:x=
`
	diff, ok := significantDiff(out)
	want := "    go.mod: -\tgithub.com/queuekit/queue v0.0.0\n" +
		"    go.mod: +\tgithub.com/queuekit/queue v1.0.0\n" +
		"    go.sum: -github.com/queuekit/queuex v1.0.0 h1:x="
	if !ok || diff != want {
		t.Fatalf("significantDiff = %q, %v; want %q, true", diff, ok, want)
	}
}

func TestSignificantDiffNotADiff(t *testing.T) {
	if _, ok := significantDiff("go: github.com/x@v1: 403 Forbidden\n"); ok {
		t.Fatal("an error message was taken for a diff")
	}
}

func TestReadIncompatible(t *testing.T) {
	name := filepath.Join(t.TempDir(), "incompatible.txt")
	data := "# comment\n\ngithub.com/queuekit/queue: X: removed\n  plan: v2 at one commit \n"
	if err := os.WriteFile(name, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	recorded, plan, err := readIncompatible(name)
	if err != nil {
		t.Fatal(err)
	}
	if len(recorded) != 1 || !recorded["github.com/queuekit/queue: X: removed"] || plan != "v2 at one commit" {
		t.Fatalf("readIncompatible = %v, %q", recorded, plan)
	}
	if recorded, plan, err = readIncompatible(filepath.Join(t.TempDir(), "missing")); err != nil || len(recorded) != 0 || plan != "" {
		t.Fatalf("missing file: %v, %q, %v", recorded, plan, err)
	}
}

// The proxy's zip of a module leaves out its nested modules, and the
// next-minor core carries the extra file.
func TestPublishLeavesNestedModulesOut(t *testing.T) {
	src := t.TempDir()
	files := map[string]string{
		"go.mod":       "module example.com/m\n\ngo 1.25\n",
		"m.go":         "package m\n",
		"sub/go.mod":   "module example.com/m/sub\n\ngo 1.25\n",
		"sub/sub.go":   "package sub\n",
		"inner/pkg.go": "package inner\n",
	}
	for name, text := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(src, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	proxy := t.TempDir()
	m := modDir{Path: "example.com/M", Dir: src, Mod: []byte(files["go.mod"])}
	if err := publish(proxy, m, "v1.1.0", map[string]string{"extra.go": "package m\n"}); err != nil {
		t.Fatal(err)
	}
	esc, _ := module.EscapePath(m.Path) // example.com/!m
	vdir := filepath.Join(proxy, filepath.FromSlash(esc), "@v")
	z, err := os.ReadFile(filepath.Join(vdir, "v1.1.0.zip"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := zip.NewReader(bytes.NewReader(z), int64(len(z)))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range r.File {
		got = append(got, f.Name)
	}
	want := map[string]bool{
		"example.com/M@v1.1.0/go.mod":       true,
		"example.com/M@v1.1.0/m.go":         true,
		"example.com/M@v1.1.0/inner/pkg.go": true,
		"example.com/M@v1.1.0/extra.go":     true,
	}
	if len(got) != len(want) {
		t.Fatalf("zip holds %v, want %v", got, want)
	}
	for _, name := range got {
		if !want[name] {
			t.Fatalf("zip holds %v, want %v", got, want)
		}
	}
	for _, name := range []string{"list", "v1.1.0.info", "v1.1.0.mod"} {
		if _, err := os.Stat(filepath.Join(vdir, name)); err != nil {
			t.Fatal(err)
		}
	}
}
