package inferrail_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestFuzzTargetsListed: `make fuzz` runs the Makefile's FUZZ_TARGETS, so a
// fuzz target missing from the list is fuzzed by nobody, and a listed one
// that no longer exists breaks the run.
func TestFuzzTargetsListed(t *testing.T) {
	listed := makefileFuzzTargets(t)
	found := fuzzFunctions(t)
	if len(found) == 0 {
		t.Fatal("found no fuzz target; the scan is broken")
	}
	for _, f := range found {
		if !slices.Contains(listed, f) {
			t.Errorf("%s is not in the Makefile's FUZZ_TARGETS", f)
		}
	}
	for _, l := range listed {
		if !slices.Contains(found, l) {
			t.Errorf("FUZZ_TARGETS lists %s, which no test file defines", l)
		}
	}
}

// makefileFuzzTargets reads FUZZ_TARGETS as ./package:Target entries.
func makefileFuzzTargets(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("Makefile")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "\nFUZZ_TARGETS := \\\n")
	if !ok {
		t.Fatal("the Makefile has no FUZZ_TARGETS := \\ list")
	}
	list, _, _ := strings.Cut(rest, "\n\n")
	var out []string
	for _, f := range strings.Fields(list) {
		if f != "\\" {
			out = append(out, f)
		}
	}
	return out
}

// fuzzFunctions finds every top-level Fuzz function below goRoots, as
// ./package:Target.
func fuzzFunctions(t *testing.T) []string {
	t.Helper()
	var out []string
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
				if fn, ok := decl.(*ast.FuncDecl); ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Fuzz") {
					out = append(out, "./"+filepath.ToSlash(filepath.Dir(path))+":"+fn.Name.Name)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}
