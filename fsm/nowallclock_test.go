package fsm

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestNoWallClockOrRandomness keeps the FSM deterministic, like Nomad's
// semgrep rule fsm_time.yml: no non-test file of the package may read the
// wall clock or a random source.
func TestNoWallClockOrRandomness(t *testing.T) {
	bannedImports := map[string]bool{"math/rand": true, "math/rand/v2": true, "crypto/rand": true}
	bannedTime := map[string]bool{"Now": true, "Since": true, "Until": true, "After": true, "Tick": true, "NewTimer": true, "NewTicker": true, "AfterFunc": true, "Sleep": true}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for _, v := range violations(f, fset, bannedImports, bannedTime) {
			t.Errorf("%s", v)
		}
	}
	if checked < 5 {
		t.Fatalf("checked only %d files: is the test running in the package directory?", checked)
	}
}

func violations(f *ast.File, fset *token.FileSet, bannedImports, bannedTime map[string]bool) []string {
	var out []string
	timeName := ""
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		if bannedImports[path] {
			out = append(out, fset.Position(imp.Pos()).String()+": imports "+path)
		}
		if path == "time" {
			timeName = "time"
			if imp.Name != nil {
				timeName = imp.Name.Name
			}
		}
	}
	if timeName == "" {
		return out
	}
	ast.Inspect(f, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if id, ok := sel.X.(*ast.Ident); ok && id.Name == timeName && bannedTime[sel.Sel.Name] {
			out = append(out, fset.Position(sel.Pos()).String()+": uses time."+sel.Sel.Name)
		}
		return true
	})
	return out
}

// The checker itself must catch what it is meant to.
func TestNoWallClockCheckerCatches(t *testing.T) {
	src := `package x
import (
	t "time"
	"math/rand"
)
func f() { _ = t.Now(); _ = t.Since(t.Time{}); _ = rand.Int() }`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "x.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := violations(f, fset, map[string]bool{"math/rand": true}, map[string]bool{"Now": true, "Since": true})
	if len(got) != 3 {
		t.Fatalf("violations %v, want 3", got)
	}
}
