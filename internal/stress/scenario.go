package stress

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/inferrail/inferrail/internal/harness"
)

// Scenario is one stress scenario as a value. C is its family's config,
// R what a run of it works on: the family's run in progress, which the
// family's shared steps (children, loads, checks) hang off.
type Scenario[C, R any] struct {
	// Name names the scenario in --scenarios and its results file,
	// <Name>.json.
	Name string
	// Stresses says in a line what the scenario puts under stress.
	Stresses string
	// Params is where the scenario's parameters sit in C, the path its
	// problems are reported under, and Load finds them in a config.
	Params string
	Load   func(c *C) Validator
	// Needs are the executables (C's keys) the scenario starts, beyond the
	// one every scenario of the family starts.
	Needs []string
	// Setup, when not nil, starts what the scenario runs against before
	// Run: a step the family's scenarios share.
	Setup func(ctx context.Context, r R) error
	// Run carries the scenario out on r.
	Run func(ctx context.Context, r R) error
}

// Validator is a scenario's parameters.
type Validator interface{ Validate() error }

// Names lists the names of scenarios, in order.
func Names[C, R any](scenarios []Scenario[C, R]) []string {
	names := make([]string, len(scenarios))
	for i, s := range scenarios {
		names[i] = s.Name
	}
	return names
}

// Selected reports whether the scenario name is among selected; an empty
// selection selects every scenario.
func Selected(selected []string, name string) bool {
	return len(selected) == 0 || slices.Contains(selected, name)
}

// Needed reports whether any of the selected scenarios needs need.
func Needed[C, R any](scenarios []Scenario[C, R], selected []string, need string) bool {
	for _, s := range scenarios {
		if Selected(selected, s.Name) && slices.Contains(s.Needs, need) {
			return true
		}
	}
	return false
}

// ValidateSelection reports every problem of c's scenario selection and of
// the parameters of the scenarios it selects.
func ValidateSelection[C, R any](c *C, scenarios []Scenario[C, R], selected []string) []error {
	names := Names(scenarios)
	var errs []error
	for i, s := range selected {
		if !slices.Contains(names, s) {
			errs = append(errs, fmt.Errorf("scenarios[%d]: unknown scenario %q (known: %s)", i, s, strings.Join(names, ", ")))
		}
	}
	for _, s := range scenarios {
		if Selected(selected, s.Name) {
			errs = append(errs, Prefixed(s.Params, s.Load(c).Validate())...)
		}
	}
	return errs
}

// Suite is how a family runs its scenarios.
type Suite[C, R any] struct {
	// Dir receives <scenario>.json for each scenario run.
	Dir string
	// Begin makes the run of a scenario; End closes it once the scenario has
	// run (err is how it failed) and returns the result to write.
	Begin func(s Scenario[C, R]) R
	End   func(s Scenario[C, R], r R, err error) (any, error)
	// Logger reports each scenario's start at Info. Nil discards.
	Logger *slog.Logger
}

// Run runs the selected scenarios one after another, in the order of
// scenarios, and writes each one's result to Dir. Failures a scenario
// measures are part of its result; the error is for a scenario that could
// not run at all, and stops the suite.
func (u Suite[C, R]) Run(ctx context.Context, scenarios []Scenario[C, R], selected []string) error {
	if u.Logger == nil {
		u.Logger = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(u.Dir, 0o755); err != nil {
		return err
	}
	for _, s := range scenarios {
		if !Selected(selected, s.Name) {
			continue
		}
		u.Logger.Info("scenario start", "scenario", s.Name, "stresses", s.Stresses)
		r := u.Begin(s)
		var err error
		if s.Setup != nil {
			err = s.Setup(ctx, r)
		}
		if err == nil {
			err = s.Run(ctx, r)
		}
		res, err := u.End(s, r, err)
		if err != nil {
			return fmt.Errorf("%s: %w", s.Name, err)
		}
		if err := harness.WriteJSON(filepath.Join(u.Dir, s.Name+".json"), res); err != nil {
			return err
		}
	}
	return nil
}
