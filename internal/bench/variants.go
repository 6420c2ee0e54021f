package bench

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/inferrail/inferrail/internal/procs"
)

// SweepVariant is a gateway setting a sweep measures beside the defaults,
// on the same requests at the same times: a JSON merge patch of the
// generated gateway config (RunSpec.GatewayPatch), for some policies.
type SweepVariant struct {
	// Name names the variant in file names and the report. Required,
	// unique, letters, digits and '-' only.
	Name string `toml:"name"`
	// Policies are the gateway policies that run under the variant.
	// Required; not a peer router.
	Policies []string `toml:"policies"`
	// GatewayPatch is the patch, a JSON object. Required.
	GatewayPatch string `toml:"gateway_patch"`
}

// variantsOf are the variants policy runs under, in the file's order.
func (f *SweepFile) variantsOf(policy string) []SweepVariant {
	var out []SweepVariant
	for _, v := range f.Variants {
		if slices.Contains(v.Policies, policy) {
			out = append(out, v)
		}
	}
	return out
}

// checkVariants reports every variant that no run could take.
func (f *SweepFile) checkVariants() []error {
	var errs []error
	run := slices.Clone(f.Policies)
	for _, p := range f.Points {
		run = append(run, p.Policies...)
	}
	fail := func(i int, format string, args ...any) {
		errs = append(errs, fmt.Errorf("variants[%d]: %s", i, fmt.Sprintf(format, args...)))
	}
	for i, v := range f.Variants {
		switch {
		case v.Name == "":
			fail(i, "name: required")
		case !variantName(v.Name):
			fail(i, "name: letters, digits and '-' only, not %q", v.Name)
		case slices.IndexFunc(f.Variants, func(w SweepVariant) bool { return w.Name == v.Name }) < i:
			fail(i, "name: %q is used twice", v.Name)
		}
		if len(v.Policies) == 0 {
			fail(i, "policies: at least one is required")
		}
		for j, pol := range v.Policies {
			if procs.IsPeerPolicy(pol) {
				fail(i, "policies[%d]: %s is a peer router, which has no gateway config to patch", j, pol)
			} else if err := checkPolicy(pol); err != nil {
				fail(i, "policies[%d]: %v", j, err)
			} else if !slices.Contains(run, pol) {
				fail(i, "policies[%d]: %s is not among the policies the sweep runs", j, pol)
			}
		}
		if !jsonObject(v.GatewayPatch) {
			fail(i, "gateway_patch: must be a JSON object, not %q", v.GatewayPatch)
		}
	}
	return errs
}

// jsonObject reports whether s is a JSON object, as a merge patch of a
// config must be (null or any other value would replace the whole config).
func jsonObject(s string) bool {
	var obj map[string]json.RawMessage
	return json.Unmarshal([]byte(s), &obj) == nil && obj != nil
}

// variantName reports whether name is letters, digits and '-' only, so
// that it reads the same in a file name.
func variantName(name string) bool {
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return true
}
