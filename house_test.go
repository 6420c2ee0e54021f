// Tests of the repository's own habits, which no single package owns:
// package docs, and the sizes of files and functions.
package inferrail_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// goRoots are the directories whose Go packages the house rules cover.
var goRoots = []string{"cmd", "internal", "dashboards", "deploy"}

// TestEveryPackageHasOneDoc: every package under goRoots has
// exactly one package comment, in one of its non-test files, so that
// `go doc` says what the package is for and no two files disagree about it.
func TestEveryPackageHasOneDoc(t *testing.T) {
	docs := map[string][]string{} // directory → files with a package comment
	fset := token.NewFileSet()
	for _, root := range goRoots {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if d.Name() == "testdata" {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			f, err := parser.ParseFile(fset, path, nil, parser.PackageClauseOnly|parser.ParseComments)
			if err != nil {
				return err
			}
			dir := filepath.Dir(path)
			if _, ok := docs[dir]; !ok {
				docs[dir] = nil
			}
			if f.Doc != nil {
				docs[dir] = append(docs[dir], filepath.Base(path))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(docs) == 0 {
		t.Fatal("no packages found: run the test from the repository root")
	}
	for dir, files := range docs {
		switch len(files) {
		case 1:
		case 0:
			t.Errorf("%s: no package comment (add a doc.go)", dir)
		default:
			t.Errorf("%s: package comments in %v; keep one", dir, files)
		}
	}
}

// Limits that keep the code readable in one sitting: a non-test file of at
// most maxFileLines lines, a function of at most maxFuncLines.
const (
	maxFileLines = 800
	maxFuncLines = 100
)

// TestSizesStayReadable: no non-test Go file under goRoots is
// over maxFileLines lines, and no function in one over maxFuncLines. A
// longer one is split by what its parts do before it lands.
func TestSizesStayReadable(t *testing.T) {
	fset := token.NewFileSet()
	files := 0
	for _, root := range goRoots {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && d.Name() == "testdata" {
				return filepath.SkipDir
			}
			if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			files++
			if n := fset.File(f.Pos()).LineCount(); n > maxFileLines {
				t.Errorf("%s: %d lines, over %d", path, n, maxFileLines)
			}
			for _, decl := range f.Decls {
				fd, ok := decl.(*ast.FuncDecl)
				if !ok || fd.Body == nil {
					continue
				}
				if n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1; n > maxFuncLines {
					t.Errorf("%s: %s is %d lines, over %d", path, fd.Name.Name, n, maxFuncLines)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if files == 0 {
		t.Fatal("no Go files found: run the test from the repository root")
	}
}
