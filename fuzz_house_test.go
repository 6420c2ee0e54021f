package inferrail_test

import (
	"go/ast"
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
	var out []string
	for _, f := range strings.Fields(makefileBlock(t, "\nFUZZ_TARGETS := \\\n", "FUZZ_TARGETS := \\ list")) {
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
	eachTestFunc(t, func(dir string, fn *ast.FuncDecl) {
		if strings.HasPrefix(fn.Name.Name, "Fuzz") {
			out = append(out, "./"+dir+":"+fn.Name.Name)
		}
	})
	return out
}
