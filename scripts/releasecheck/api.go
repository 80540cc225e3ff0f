package main

import (
	"archive/zip"
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"go/token"
	"go/types"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/exp/apidiff"
	"golang.org/x/tools/go/gcexportdata"
	"golang.org/x/tools/go/packages"
)

// apiModules are the modules whose API users depend on. queuectl,
// examples, bench and browsertest have no package a user imports (they
// hold commands, or the repository's own benchmarks and tests).
var apiModules = []string{corePath, corePath + "/pgstore", corePath + "/redisstore", corePath + "/sqlitestore", corePath + "/otelqueue"}

// incompatibleFile records the incompatible changes made on purpose.
const incompatibleFile = "api/incompatible.txt"

// cmdAPI compares the exported API of each module of apiModules with
// its baseline in api/, or rewrites the baselines with -update.
//
// A baseline is two files: api/<name>.apidata, the export data of the
// module's packages (a zip in the format of apidiff -m -w, so apidiff
// itself reads it), which the check compares with apidiff; and
// api/<name>.txt, the same API as text, for the reviewer of a change.
// Packages under internal/ and package main are left out; so are test
// files.
func cmdAPI(ws *workspace, args []string) error {
	fs := flag.NewFlagSet("api", flag.ContinueOnError)
	update := fs.Bool("update", false, "rewrite the baselines in api/ from the work tree")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("api: unexpected argument %q", fs.Arg(0))
	}
	recorded, plan, err := readIncompatible(filepath.Join(ws.Root, incompatibleFile))
	if err != nil {
		return err
	}
	used := map[string]bool{}
	var unrecorded []string
	for _, modPath := range apiModules {
		m, err := ws.module(modPath)
		if err != nil {
			return err
		}
		fset := token.NewFileSet()
		cur, err := loadAPI(ws, fset, m)
		if err != nil {
			return err
		}
		base := filepath.Join(ws.Root, "api", apiName(modPath))
		if *update {
			if err := writeBaseline(base, fset, cur); err != nil {
				return err
			}
			fmt.Printf("wrote %s.apidata and %s.txt (%d packages)\n", rel(ws, base), rel(ws, base), len(cur.Packages))
			continue
		}
		old, err := readBaseline(base, token.NewFileSet())
		if err != nil {
			return fmt.Errorf("%w (scripts/api-check.sh -update writes it)", err)
		}
		report := apidiff.ModuleChanges(old, cur)
		var compatible []string
		for _, c := range report.Changes {
			msg := modPath + ": " + c.Message
			switch {
			case c.Compatible:
				compatible = append(compatible, msg)
			case recorded[msg]:
				used[msg] = true
				fmt.Printf("recorded incompatible change: %s\n", msg)
			default:
				unrecorded = append(unrecorded, msg)
			}
		}
		txt, err := os.ReadFile(base + ".txt")
		if err != nil {
			return err
		}
		switch {
		case len(compatible) > 0:
			fmt.Printf("NOTICE %s: compatible changes since the baseline; refresh it with scripts/api-check.sh -update and commit api/:\n    %s\n",
				modPath, strings.Join(compatible, "\n    "))
		case !bytes.Equal(txt, apiText(cur)):
			fmt.Printf("NOTICE %s: api/%s.txt is out of date (no API change apidiff counts); refresh it with scripts/api-check.sh -update\n", modPath, apiName(modPath))
		}
	}
	if *update {
		return nil
	}
	for msg := range recorded {
		if !used[msg] {
			fmt.Printf("NOTICE %s names a change the baseline no longer shows (remove it once the baseline is refreshed): %s\n", incompatibleFile, msg)
		}
	}
	if len(unrecorded) > 0 {
		fmt.Printf("FAIL api: %d incompatible changes; for each one you mean, add the line below to %s, with a \"plan:\" line for the major version:\n    %s\n",
			len(unrecorded), incompatibleFile, strings.Join(unrecorded, "\n    "))
		return errors.New("api: incompatible changes not recorded")
	}
	if len(used) > 0 && plan == "" {
		fmt.Printf("FAIL api: %s names incompatible changes but no \"plan:\" line (how the next major version carries them)\n", incompatibleFile)
		return errors.New("api: no plan for the incompatible changes")
	}
	fmt.Printf("PASS api: %s match their baselines in api/ but for recorded changes\n", strings.Join(apiModules, ", "))
	return nil
}

func rel(ws *workspace, name string) string {
	r, err := filepath.Rel(ws.Root, name)
	if err != nil {
		return name
	}
	return r
}

// apiName is the base name of a module's baseline files: "queue" for
// the core, the last element of the path for the others.
func apiName(modPath string) string { return path.Base(modPath) }

// readIncompatible reads the recorded incompatible changes: one per line,
// as the check prints them; "plan: ..." says how the next major version
// takes them; blank lines and lines starting with # are comments. A
// missing file records nothing.
func readIncompatible(name string) (map[string]bool, string, error) {
	recorded := map[string]bool{}
	f, err := os.Open(name)
	if errors.Is(err, os.ErrNotExist) {
		return recorded, "", nil
	} else if err != nil {
		return nil, "", err
	}
	defer f.Close()
	var plan string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "", strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "plan:"):
			plan = strings.TrimSpace(strings.TrimPrefix(line, "plan:"))
		default:
			recorded[line] = true
		}
	}
	return recorded, plan, sc.Err()
}

// loadAPI type-checks the module's packages as the workspace builds them.
func loadAPI(ws *workspace, fset *token.FileSet, m modDir) (*apidiff.Module, error) {
	cfg := &packages.Config{
		Mode: packages.NeedName | packages.NeedTypes | packages.NeedModule,
		Dir:  m.Dir,
		Env:  append(os.Environ(), "GOWORK="+filepath.Join(ws.Root, "go.work"), "GOFLAGS=-trimpath"),
		Fset: fset,
	}
	pkgs, err := packages.Load(cfg, m.Path+"/...")
	if err != nil {
		return nil, err
	}
	mod := &apidiff.Module{Path: m.Path}
	var errs []error
	for _, p := range pkgs {
		if p.Module == nil || p.Module.Path != m.Path || p.Name == "main" || isInternal(p.PkgPath) {
			continue
		}
		for _, e := range p.Errors {
			errs = append(errs, e)
		}
		mod.Packages = append(mod.Packages, p.Types)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("loading %s: %w", m.Path, errors.Join(errs...))
	}
	slices.SortFunc(mod.Packages, func(a, b *types.Package) int { return strings.Compare(a.Path(), b.Path()) })
	return mod, nil
}

func isInternal(pkgPath string) bool {
	return slices.Contains(strings.Split(pkgPath, "/"), "internal")
}

// writeBaseline writes base.apidata and base.txt.
func writeBaseline(base string, fset *token.FileSet, m *apidiff.Module) error {
	if err := os.MkdirAll(filepath.Dir(base), 0o755); err != nil {
		return err
	}
	var buf bytes.Buffer
	w := zip.NewWriter(&buf)
	entry, err := w.Create("module")
	if err != nil {
		return err
	}
	if _, err := io.WriteString(entry, m.Path); err != nil {
		return err
	}
	for _, p := range m.Packages {
		entry, err := w.Create(p.Path() + ".x")
		if err != nil {
			return err
		}
		if err := gcexportdata.Write(entry, fset, p); err != nil {
			return fmt.Errorf("writing %s: %w", p.Path(), err)
		}
	}
	if err := w.Close(); err != nil {
		return err
	}
	if err := os.WriteFile(base+".apidata", buf.Bytes(), 0o644); err != nil {
		return err
	}
	return os.WriteFile(base+".txt", apiText(m), 0o644)
}

// readBaseline reads what writeBaseline wrote (the .apidata file).
func readBaseline(base string, fset *token.FileSet) (*apidiff.Module, error) {
	z, err := zip.OpenReader(base + ".apidata")
	if err != nil {
		return nil, err
	}
	defer z.Close()
	m := &apidiff.Module{}
	for _, f := range z.File {
		r, err := f.Open()
		if err != nil {
			return nil, err
		}
		data, err := io.ReadAll(r)
		r.Close()
		if err != nil {
			return nil, err
		}
		if f.Name == "module" {
			m.Path = string(data)
			continue
		}
		pkgPath, ok := strings.CutSuffix(f.Name, ".x")
		if !ok {
			return nil, fmt.Errorf("%s.apidata: unexpected entry %q", base, f.Name)
		}
		p, err := gcexportdata.Read(bytes.NewReader(data), fset, map[string]*types.Package{}, pkgPath)
		if err != nil {
			return nil, fmt.Errorf("%s.apidata: %s: %w", base, pkgPath, err)
		}
		m.Packages = append(m.Packages, p)
	}
	if m.Path == "" {
		return nil, fmt.Errorf("%s.apidata: no module path", base)
	}
	return m, nil
}

// apiText lists the exported API of m, one declaration a line, sorted:
// each package's exported names with their types, and the exported
// methods of its named types.
func apiText(m *apidiff.Module) []byte {
	var b bytes.Buffer
	for _, p := range m.Packages {
		qual := types.RelativeTo(p)
		fmt.Fprintf(&b, "package %s\n", p.Path())
		scope := p.Scope()
		for _, name := range scope.Names() {
			obj := scope.Lookup(name)
			if !obj.Exported() {
				continue
			}
			tn, ok := obj.(*types.TypeName)
			if !ok || tn.IsAlias() {
				fmt.Fprintf(&b, "\t%s\n", types.ObjectString(obj, qual))
				continue
			}
			writeType(&b, tn, qual)
			named, ok := tn.Type().(*types.Named)
			if !ok {
				continue
			}
			mset := types.NewMethodSet(types.NewPointer(named))
			for i := range mset.Len() {
				if fn := mset.At(i).Obj(); fn.Exported() {
					fmt.Fprintf(&b, "\t%s\n", types.ObjectString(fn, qual))
				}
			}
		}
	}
	return b.Bytes()
}

// writeType writes a defined type; a struct's unexported fields are
// left out, as they are no part of the API.
func writeType(b *bytes.Buffer, tn *types.TypeName, qual types.Qualifier) {
	decl := types.ObjectString(tn, qual)
	st, ok := tn.Type().Underlying().(*types.Struct)
	if !ok {
		fmt.Fprintf(b, "\t%s\n", decl)
		return
	}
	if i := strings.Index(decl, " struct{"); i >= 0 {
		decl = decl[:i] + " struct"
	}
	fmt.Fprintf(b, "\t%s\n", decl)
	for f := range st.Fields() {
		if f.Exported() {
			fmt.Fprintf(b, "\tfield %s.%s %s\n", tn.Name(), f.Name(), types.TypeString(f.Type(), qual))
		}
	}
}
