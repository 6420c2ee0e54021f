package bench

import (
	"math"
	"strings"
	"testing"

	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/sim"
)

// TestDefaultCostModelIsTheSimulators holds the report's calibration note
// true: the gateway's default prefill constants are the simulators'. If one
// side's default changes, the note (writeCalibration) and README's
// benchmark section must change with it.
func TestDefaultCostModelIsTheSimulators(t *testing.T) {
	cm, lat := config.Default().Routing.CostModel, sim.DefaultLatency()
	for _, c := range []struct {
		name          string
		gateway, sims float64
	}{
		{"a", cm.PrefillTokenSecs, lat.PrefillToken.Seconds()},
		{"b", cm.PrefillPairSecs, lat.PrefillPair * 1e-9},
		{"d", cm.PrefillFixedSecs, lat.PrefillFixed.Seconds()},
	} {
		if math.Abs(c.gateway-c.sims) > 1e-12*c.sims {
			t.Errorf("%s: gateway %g s, simulator %g s", c.name, c.gateway, c.sims)
		}
	}
}

// TestCalibrationNote: a report with cost_model on the harness's own fleet
// says it ran perfectly calibrated, and names the rows that were not.
func TestCalibrationNote(t *testing.T) {
	const note = "**Calibration:** the gateway's default `routing.cost_model` is the simulators' own prefill law"
	patched := func(r *RunResult, variant, patch string) *RunResult {
		r.Spec.Variant, r.Spec.GatewayPatch = variant, patch
		return r
	}
	for _, tt := range []struct {
		name    string
		results []*RunResult
		want    []string // in the report
		not     []string // not in it
	}{
		{"cost_model_is_calibrated", []*RunResult{
			p99Result("w1", 4, "cost_model", 1), p99Result("w1", 4, "least_request", 2),
		}, []string{note, "cost_model ran perfectly calibrated here"}, []string{"speedup", "Not so in rows", "Nor where"}},
		{"on_a_faster_clock_scaled_alike", []*RunResult{
			func() *RunResult { r := p99Result("w1", 4, "cost_model", 1); r.Spec.Speedup = 4; return r }(),
		}, []string{note + ", term for term and constant for constant, divided by the speedup as theirs is, and every gateway row"}, nil},
		{"no_cost_model_no_note", []*RunResult{
			p99Result("w1", 4, "kv_aware", 1), p99Result("w1", 4, "peer:sglang-router:cache_aware", 2),
		}, nil, []string{"**Calibration:**"}},
		{"an_existing_url_is_not_ours_to_calibrate", []*RunResult{
			func() *RunResult { r := p99Result("w1", 4, "", 1); r.Spec.URL = "http://gateway:8080"; return r }(),
		}, nil, []string{"**Calibration:**"}},
		{"a_variant_with_its_own_constants_is_named", []*RunResult{
			p99Result("w1", 4, "cost_model", 1),
			patched(p99Result("w1", 4, "cost_model", 1), "miscal", `{"routing":{"cost_model":{"prefill_token_secs":0.0002}}}`),
			patched(p99Result("w1", 4, "cost_model", 1), "model-tok", `{"models":[{"name":"m","tokenizer":"dir"}]}`),
			patched(p99Result("w1", 4, "cost_model", 1), "interference", `{"routing":{"cost_model":{"decode_interference_secs":0.002}}}`),
		}, []string{note, "own prefill constants or tokenizer: cost_model (miscal), cost_model (model-tok)."}, []string{"cost_model (interference)", "Nor where"}},
		{"simulators_with_their_own_law", []*RunResult{
			func() *RunResult {
				r := p99Result("w1", 4, "cost_model", 1)
				r.Spec.SimArgs = []string{"--prefill-fixed-ms=9"}
				return r
			}(),
		}, []string{note, "Nor where the simulators' extra flags set their own prefill constants"}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// The note is one paragraph of the report's setup.
			report := RenderRunReport(tt.results)
			_, para, _ := strings.Cut(report, "**Calibration:**")
			para, _, _ = strings.Cut(para, "\n\n")
			if para != "" {
				para = "**Calibration:**" + para
			}
			for _, s := range tt.want {
				if !strings.Contains(para, s) {
					t.Errorf("the note lacks %q:\n%s", s, para)
				}
			}
			for _, s := range tt.not {
				if strings.Contains(para, s) {
					t.Errorf("the note has %q:\n%s", s, para)
				}
			}
		})
	}
}

func TestSetsPrefillLaw(t *testing.T) {
	for arg, want := range map[string]bool{
		"--prefill-token-us": true, "-prefill-pair-ns=4": true, "--prefill-fixed-ms=9": true,
		"--decode-token-ms": false, "prefill-token-us": false, "--num-gpu-blocks-override": false, "50": false,
	} {
		if got := setsPrefillLaw(arg); got != want {
			t.Errorf("setsPrefillLaw(%q) = %v, want %v", arg, got, want)
		}
	}
}
