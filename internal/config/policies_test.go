package config

import (
	"slices"
	"testing"

	"github.com/inferrail/inferrail/internal/policy"
)

// TestPolicyNamesMatchTheRegistry ties the names a config may give a
// model's policy to the policies the gateway can build: a policy added to
// one list and not the other would pass validation and fail at startup, or
// never be reachable from a config.
func TestPolicyNamesMatchTheRegistry(t *testing.T) {
	if got, want := slices.Sorted(slices.Values(policies)), slices.Sorted(slices.Values(policy.Names())); !slices.Equal(got, want) {
		t.Fatalf("config accepts %v, the registry builds %v", got, want)
	}
	for _, name := range policies {
		if _, err := policy.NewWith(name, policy.DefaultSettings()); err != nil {
			t.Errorf("config accepts %s, which does not build: %v", name, err)
		}
	}
}

// TestHotDemandsMatchThePolicy ties the hot-prefix counts a config may
// name to those the cost model accepts, and the two defaults together.
func TestHotDemandsMatchThePolicy(t *testing.T) {
	for _, d := range append(slices.Clone(hotDemands), "uncached") {
		s := policy.DefaultSettings()
		s.HotPrefix.Demand = d
		if err := s.Validate(); (err == nil) != slices.Contains(hotDemands, d) {
			t.Errorf("demand %q: config accepts it %v, the policy's error %v", d, slices.Contains(hotDemands, d), err)
		}
	}
	if got, want := Default().Routing.HotPrefix.Demand, policy.DefaultSettings().HotPrefix.Demand; got != want {
		t.Errorf("config's default demand %q, the policy's %q", got, want)
	}
	if got, want := Default().Routing.HotPrefix.Copies, policy.DefaultSettings().HotPrefix.Copies; got != want {
		t.Errorf("config's default copies %v, the policy's %v", got, want)
	}
}
