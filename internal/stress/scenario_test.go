package stress

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

type testLoad struct{ N int }

func (l testLoad) Validate() error {
	if l.N <= 0 {
		return errors.New("n: must be positive")
	}
	return nil
}

type testConfig struct{ A, B testLoad }

type testRun struct {
	name string
	out  []string
}

func testScenarios(ran *[]string) []Scenario[testConfig, *testRun] {
	run := func(ctx context.Context, r *testRun) error {
		*ran = append(*ran, r.name)
		if r.name == "fails" {
			return errors.New("boom")
		}
		r.out = append(r.out, "ran "+r.name)
		return nil
	}
	return []Scenario[testConfig, *testRun]{
		{Name: "first", Params: "a", Load: func(c *testConfig) Validator { return c.A }, Needs: []string{"x"}, Run: run},
		{Name: "second", Params: "b", Load: func(c *testConfig) Validator { return c.B }, Run: run},
		{Name: "fails", Params: "b", Load: func(c *testConfig) Validator { return c.B }, Run: run},
	}
}

func TestScenarioSelection(t *testing.T) {
	s := testScenarios(new([]string))
	if got := Names(s); !reflect.DeepEqual(got, []string{"first", "second", "fails"}) {
		t.Errorf("Names = %v", got)
	}
	if !Selected(nil, "second") || Selected([]string{"first"}, "second") {
		t.Error("Selected: an empty selection selects all, a list only its names")
	}
	if !Needed(s, nil, "x") || Needed(s, []string{"second"}, "x") {
		t.Error("Needed: only the selected scenarios' needs count")
	}
	c := testConfig{A: testLoad{0}, B: testLoad{1}}
	errs := errors.Join(ValidateSelection(&c, s, []string{"second", "nope"})...)
	if errs == nil || !strings.Contains(errs.Error(), `scenarios[1]: unknown scenario "nope" (known: first, second, fails)`) ||
		strings.Contains(errs.Error(), "a.n") {
		t.Errorf("ValidateSelection = %v, want the unknown name and no problem of the unselected scenario", errs)
	}
	if errs := ValidateSelection(&c, s, nil); len(errs) != 1 || errs[0].Error() != "a.n: must be positive" {
		t.Errorf("ValidateSelection of all = %v, want a.n's problem", errs)
	}
}

// A suite runs the selected scenarios in order, writes each result, and
// stops at the first that cannot run, naming it.
func TestSuiteRun(t *testing.T) {
	var ran []string
	dir := filepath.Join(t.TempDir(), "out")
	suite := Suite[testConfig, *testRun]{Dir: dir,
		Begin: func(s Scenario[testConfig, *testRun]) *testRun { return &testRun{name: s.Name} },
		End: func(s Scenario[testConfig, *testRun], r *testRun, err error) (any, error) {
			return map[string]any{"scenario": s.Name, "out": r.out}, err
		},
	}
	err := suite.Run(t.Context(), testScenarios(&ran), []string{"fails", "first"})
	if err == nil || err.Error() != "fails: boom" {
		t.Errorf("Run = %v, want fails: boom", err)
	}
	if !reflect.DeepEqual(ran, []string{"first", "fails"}) {
		t.Errorf("ran %v, want the selected scenarios in suite order", ran)
	}
	b, err := os.ReadFile(filepath.Join(dir, "first.json"))
	if err != nil || !strings.Contains(string(b), `"ran first"`) {
		t.Errorf("first.json = %s, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "fails.json")); err == nil {
		t.Error("a scenario that could not run left a results file")
	}
}

// A scenario whose Setup fails does not run, and the suite stops there.
func TestSuiteSetupFails(t *testing.T) {
	ran := false
	s := []Scenario[testConfig, *testRun]{{Name: "broken", Params: "a", Load: func(c *testConfig) Validator { return c.A },
		Setup: func(context.Context, *testRun) error { return errors.New("no fleet") },
		Run:   func(context.Context, *testRun) error { ran = true; return nil }}}
	suite := Suite[testConfig, *testRun]{Dir: t.TempDir(),
		Begin: func(s Scenario[testConfig, *testRun]) *testRun { return &testRun{name: s.Name} },
		End: func(_ Scenario[testConfig, *testRun], r *testRun, err error) (any, error) {
			return r, err
		},
	}
	if err := suite.Run(t.Context(), s, nil); err == nil || err.Error() != "broken: no fleet" || ran {
		t.Errorf("Run = %v, ran %v; want broken: no fleet and no run", err, ran)
	}
}
