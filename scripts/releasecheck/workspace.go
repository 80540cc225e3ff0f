package main

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/mod/modfile"
)

// corePath is the module every other module of the repository requires.
const corePath = "github.com/queuekit/queue"

// modDir is one module of the workspace.
type modDir struct {
	Path string // the module path, from its go.mod
	Dir  string // its absolute directory
	Mod  []byte // its go.mod, as committed
}

// workspace is the repository: its root and the modules go.work uses.
type workspace struct {
	Root    string
	Modules []modDir
}

func loadWorkspace(root string) (*workspace, error) {
	name := filepath.Join(root, "go.work")
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("-repo %s: %w", root, err)
	}
	wf, err := modfile.ParseWork(name, data, nil)
	if err != nil {
		return nil, err
	}
	ws := &workspace{Root: root}
	for _, u := range wf.Use {
		dir := filepath.Join(root, filepath.FromSlash(u.Path))
		mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err != nil {
			return nil, err
		}
		path := modfile.ModulePath(mod)
		if path == "" {
			return nil, fmt.Errorf("%s/go.mod: no module line", u.Path)
		}
		ws.Modules = append(ws.Modules, modDir{Path: path, Dir: dir, Mod: mod})
	}
	return ws, nil
}

// module returns the workspace module with the given path.
func (ws *workspace) module(path string) (modDir, error) {
	for _, m := range ws.Modules {
		if m.Path == path {
			return m, nil
		}
	}
	return modDir{}, fmt.Errorf("go.work uses no module %s", path)
}
