package bench

import (
	"reflect"
	"strings"
	"testing"

	"github.com/inferrail/inferrail/internal/procs"
)

// TestCountDecisions: the steered and guarded decisions of every gateway's
// metrics page add up by reason across models and gateways; a series at
// zero (a reason no decision had) is left out, and a page without either
// family leaves both nil.
func TestCountDecisions(t *testing.T) {
	pages := []string{`# HELP inferrail_routing_steered_total Decisions decided by ...
# TYPE inferrail_routing_steered_total counter
inferrail_routing_steered_total{model="a",reason="copy"} 2
inferrail_routing_steered_total{model="b",reason="copy"} 1
inferrail_routing_steered_total{model="a",reason="hot_prefix"} 4
inferrail_routing_steered_total{model="a",reason="session"} 0
# HELP inferrail_routing_guards_total Decisions where a load guard ...
# TYPE inferrail_routing_guards_total counter
inferrail_routing_guards_total{guard="bounded_load",model="a"} 3
`, `# TYPE inferrail_routing_steered_total counter
inferrail_routing_steered_total{model="a",reason="hot_prefix"} 1
# TYPE inferrail_routing_guards_total counter
inferrail_routing_guards_total{guard="kv_pressure",model="a"} 5
inferrail_routing_guards_total{guard="bounded_load",model="b"} 1
`}
	var m Measurements
	for _, text := range pages {
		page, err := procs.ParsePage(strings.NewReader(text))
		if err != nil {
			t.Fatal(err)
		}
		m.countDecisions(page)
	}
	if want := map[string]int{"copy": 3, "hot_prefix": 5}; !reflect.DeepEqual(m.Steered, want) {
		t.Errorf("steered %v, want %v", m.Steered, want)
	}
	if want := map[string]int{"bounded_load": 4, "kv_pressure": 5}; !reflect.DeepEqual(m.Guards, want) {
		t.Errorf("guards %v, want %v", m.Guards, want)
	}

	var none Measurements
	page, err := procs.ParsePage(strings.NewReader("# TYPE inferrail_requests_total counter\ninferrail_requests_total{model=\"a\"} 9\n"))
	if err != nil {
		t.Fatal(err)
	}
	none.countDecisions(page)
	if none.Steered != nil || none.Guards != nil {
		t.Errorf("a page without decisions counted %v and %v", none.Steered, none.Guards)
	}
}
