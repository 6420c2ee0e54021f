package bench

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// writeCalibration says, when the results hold cost_model on a fleet of
// the harness's own, that it ran perfectly calibrated: the gateway's
// default cost model is the simulators' prefill law with their constants
// (TestDefaultCostModelIsTheSimulators ties the two), fleetConfig divides
// it by the speedup as the simulators divide theirs, and the gateway
// tokenizes with the simulators' tokenizer. A real engine's prefill is
// only close to such a law, so these results are cost_model's best case,
// and a reader must be told.
func writeCalibration(w *strings.Builder, results []*RunResult) {
	if !slices.ContainsFunc(results, func(r *RunResult) bool { return r.Spec.URL == "" && r.Spec.Policy == "cost_model" }) {
		return
	}
	faster := ""
	if slices.ContainsFunc(results, func(r *RunResult) bool { return r.Spec.clock() > 1 }) {
		faster = ", divided by the speedup as theirs is"
	}
	fmt.Fprintf(w, "**Calibration:** the gateway's default `routing.cost_model` is the simulators' own prefill law, term for term "+
		"and constant for constant%s, and every gateway row tokenized with the simulators' own tokenizer (`builtin:sim`): "+
		"cost_model ran perfectly calibrated here, which on a real engine `inferrail-calibrate` and the replicas' paces only approximate.", faster)
	var own []string
	for _, r := range results {
		if l := policyLabel(&r.Spec); r.Spec.URL == "" && patchesCalibration(r.Spec.GatewayPatch) && !slices.Contains(own, l) {
			own = append(own, l)
		}
	}
	if len(own) > 0 {
		slices.Sort(own)
		fmt.Fprintf(w, " Not so in rows whose variant sets its own prefill constants or tokenizer: %s.", strings.Join(own, ", "))
	}
	if slices.ContainsFunc(results, func(r *RunResult) bool { return slices.ContainsFunc(r.Spec.SimArgs, setsPrefillLaw) }) {
		fmt.Fprint(w, " Nor where the simulators' extra flags set their own prefill constants: the gateway's default does not follow them.")
	}
	fmt.Fprint(w, "\n\n")
}

// prefillKeys are the cost model's keys that the simulators' law fixes
// (decode_interference_secs is the gateway's own guess at the wait that
// running requests add, not a term of the law).
var prefillKeys = []string{"prefill_token_secs", "prefill_pair_secs", "prefill_fixed_secs"}

// patchesCalibration reports whether a gateway patch sets a prefill
// constant of any cost_model object (routing's or a model's) or any
// tokenizer. A patch that is not JSON sets nothing the report can tell.
func patchesCalibration(patch string) bool {
	if patch == "" {
		return false
	}
	var v any
	if json.Unmarshal([]byte(patch), &v) != nil {
		return false
	}
	var walk func(v any) bool
	walk = func(v any) bool {
		switch v := v.(type) {
		case map[string]any:
			if _, ok := v["tokenizer"]; ok {
				return true
			}
			if cm, ok := v["cost_model"].(map[string]any); ok && slices.ContainsFunc(prefillKeys, func(k string) bool { _, ok := cm[k]; return ok }) {
				return true
			}
			for _, e := range v {
				if walk(e) {
					return true
				}
			}
		case []any:
			return slices.ContainsFunc(v, walk)
		}
		return false
	}
	return walk(v)
}

// setsPrefillLaw reports whether a simulator flag sets a prefill constant.
func setsPrefillLaw(arg string) bool {
	name, _, _ := strings.Cut(strings.TrimLeft(arg, "-"), "=")
	return arg != name && slices.Contains([]string{"prefill-token-us", "prefill-pair-ns", "prefill-fixed-ms"}, name)
}
