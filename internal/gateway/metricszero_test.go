package gateway

import (
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/inferrail/inferrail/internal/config"
)

// TestRefusalReasonsListed: every reason the package refuses a request
// with is in refusalReasons, whose series start at 0 (found by a review:
// a burst of errors before the first scrape of its series never showed in
// rate()). It reads the reasons from the source: the last argument of
// every newRefusal call, a constant of the package, and every shed*
// constant (sheds pass theirs along in variables).
func TestRefusalReasonsListed(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	consts := map[string]string{}
	var used []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.ValueSpec:
				for i, id := range n.Names {
					if i < len(n.Values) {
						if lit, ok := n.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							consts[id.Name], _ = strconv.Unquote(lit.Value)
							if strings.HasPrefix(id.Name, "shed") {
								used = append(used, id.Name) // sheds pass their reason along in variables
							}
						}
					}
				}
			case *ast.CallExpr:
				if name := calledName(n.Fun); name == "newRefusal" && len(n.Args) > 0 {
					if id, ok := n.Args[len(n.Args)-1].(*ast.Ident); ok {
						used = append(used, id.Name)
					}
				}
			}
			return true
		})
	}
	if len(used) < 10 {
		t.Fatalf("found %d refusal reasons in the source, want the package's many: the scan is broken", len(used))
	}
	for _, name := range used {
		if name == "reason" {
			continue // passed through: its callers' constants are checked
		}
		v, ok := consts[name]
		if !ok {
			t.Errorf("refusal reason %s is not a string constant of the package", name)
			continue
		}
		if !slices.Contains(refusalReasons, v) {
			t.Errorf("refusal reason %s (%q) is not in refusalReasons: its series would not start at 0", name, v)
		}
	}
}

// calledName is the name a call calls: f in f(...) and x.f(...).
func calledName(fun ast.Expr) string {
	switch fun := fun.(type) {
	case *ast.Ident:
		return fun.Name
	case *ast.SelectorExpr:
		return fun.Sel.Name
	}
	return ""
}

// TestCountersStartAtZero: a fresh gateway exports at 0 every error
// reason for every model (and for requests refused before their model was
// known), every outcome of every replica's requests and of the gateway's
// own answers, and every tokenizer result; a replica that joins later gets
// its outcomes at 0 too.
func TestCountersStartAtZero(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(srv.Close)
	cfg := flowConfig(srv.URL, 4)
	gw := startGatewayWith(t, cfg, Options{})
	want := [][]string{
		{"inferrail_request_errors_total", "model", "", "reason", reasonUnknownModel},
		{"inferrail_request_errors_total", "model", testModel, "reason", shedQueueFull},
		{"inferrail_request_errors_total", "model", testModel, "reason", reasonRateLimited},
		{"inferrail_requests_total", "model", testModel, "replica", "one", "status", "5xx"},
		{"inferrail_requests_total", "model", testModel, "replica", "one", "status", outcomeAborted},
		{"inferrail_requests_total", "model", testModel, "replica", "", "status", "4xx"},
		{"inferrail_requests_total", "model", "", "replica", "", "status", "4xx"},
		{"inferrail_tokenized_requests_total", "model", testModel, "result", tokSlow},
	}
	check := func(want [][]string) {
		t.Helper()
		for _, w := range want {
			m := series(t, gw, w[0], w[1:])
			if m == nil {
				t.Errorf("%s%v: no series, want one at 0", w[0], w[1:])
			} else if v := m.GetCounter().GetValue(); v != 0 {
				t.Errorf("%s%v = %v, want 0", w[0], w[1:], v)
			}
		}
	}
	check(want)
	next := *cfg
	next.Replicas = append(slices.Clone(cfg.Replicas), config.Replica{ID: "two", URL: srv.URL, Models: []string{testModel}, MaxConcurrency: 1, MaxPending: 1})
	if result, _, err := gw.g.apply(&next, "test"); result != reloadApplied {
		t.Fatalf("reload: %s, %v", result, err)
	}
	check([][]string{{"inferrail_requests_total", "model", testModel, "replica", "two", "status", outcomeCancelled}})
}

// countedWith sums the series of family on a metrics page whose labels
// hold labels (a substring such as `status="aborted"`): series start at
// 0, so a test of whether something was counted reads values, not names.
func countedWith(page, family, labels string) float64 {
	var sum float64
	for _, l := range strings.Split(page, "\n") {
		if !strings.HasPrefix(l, family+"{") || !strings.Contains(l, labels) {
			continue
		}
		if i := strings.LastIndexByte(l, ' '); i > 0 {
			v, err := strconv.ParseFloat(l[i+1:], 64)
			if err == nil {
				sum += v
			}
		}
	}
	return sum
}
