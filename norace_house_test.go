package inferrail_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestRaceSkipsRunInNorace: a test that skips under the race detector
// (`if raceEnabled {` at the top of its body) must be named in the
// Makefile's norace target, with its package, or make test never runs it.
func TestRaceSkipsRunInNorace(t *testing.T) {
	names, pkgs := noraceTarget(t)
	skipping := raceSkippingTests(t)
	if len(skipping) == 0 {
		t.Fatal("found no test that skips under the race detector; the scan is broken")
	}
	for _, s := range skipping {
		if !slices.Contains(names, s.name) {
			t.Errorf("%s (%s) skips under the race detector but the Makefile's norace target does not run it", s.name, s.dir)
		}
		if !slices.Contains(pkgs, "./"+s.dir) {
			t.Errorf("%s skips under the race detector but ./%s is not among the norace target's packages", s.name, s.dir)
		}
	}
}

type raceSkip struct{ name, dir string }

// raceSkippingTests finds every Test or Fuzz function below goRoots whose
// body has an `if raceEnabled { … t.Skip(…) }` at its top level (an
// `if raceEnabled` that only shrinks the test is not a skip).
func raceSkippingTests(t *testing.T) []raceSkip {
	t.Helper()
	var out []raceSkip
	eachTestFunc(t, func(dir string, fn *ast.FuncDecl) {
		if fn.Body == nil || !(strings.HasPrefix(fn.Name.Name, "Test") || strings.HasPrefix(fn.Name.Name, "Fuzz")) {
			return
		}
		for _, st := range fn.Body.List {
			if is, ok := st.(*ast.IfStmt); ok {
				if id, ok := is.Cond.(*ast.Ident); ok && id.Name == "raceEnabled" && skips(is.Body) {
					out = append(out, raceSkip{fn.Name.Name, dir})
					break
				}
			}
		}
	})
	return out
}

// noraceTarget reads the test names in the norace target's -run pattern
// and the packages it lists.
func noraceTarget(t *testing.T) (names, pkgs []string) {
	t.Helper()
	recipe := makefileBlock(t, "\nnorace:", "norace target")
	m := regexp.MustCompile(`-run '\^\(([^)]*)\)\$\$'`).FindStringSubmatch(recipe)
	if m == nil {
		t.Fatalf("no -run '^(…)$$' pattern in the norace recipe:\n%s", recipe)
	}
	names = strings.Split(m[1], "|")
	for _, f := range strings.Fields(recipe) {
		if strings.HasPrefix(f, "./") {
			pkgs = append(pkgs, strings.TrimSuffix(f, "/"))
		}
	}
	return names, pkgs
}

// skips reports whether the block calls a Skip method (Skip, Skipf,
// SkipNow).
func skips(b *ast.BlockStmt) bool {
	found := false
	ast.Inspect(b, func(n ast.Node) bool {
		if c, ok := n.(*ast.CallExpr); ok {
			if sel, ok := c.Fun.(*ast.SelectorExpr); ok && strings.HasPrefix(sel.Sel.Name, "Skip") {
				found = true
			}
		}
		return !found
	})
	return found
}

// makefileBlock returns the Makefile's text after start up to the next
// blank line, failing the test, with what names it, when start is not
// there.
func makefileBlock(t *testing.T, start, what string) string {
	t.Helper()
	b, err := os.ReadFile("Makefile")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), start)
	if !ok {
		t.Fatal("the Makefile has no " + what)
	}
	block, _, _ := strings.Cut(rest, "\n\n")
	return block
}

// eachTestFunc calls visit with every top-level function (no method) of
// every test file below goRoots, and the file's directory.
func eachTestFunc(t *testing.T, visit func(dir string, fn *ast.FuncDecl)) {
	t.Helper()
	fset := token.NewFileSet()
	for _, root := range goRoots {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			for _, decl := range f.Decls {
				if fn, ok := decl.(*ast.FuncDecl); ok && fn.Recv == nil {
					visit(filepath.ToSlash(filepath.Dir(path)), fn)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
