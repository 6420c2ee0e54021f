//go:build grafanaschema

// The schema check is behind a build tag because Grafana's Foundation SDK
// is some 100,000 lines of generated Go, which would add about half a
// minute of compiling to every make test; make dashboard-check runs it.

package dashboards

import (
	"bytes"
	"errors"
	"testing"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	grafanaprom "github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// grafanaSchema decodes a dashboard strictly into the types Grafana's
// Foundation SDK generates from Grafana's own schema, with the panel and
// query kinds the dashboard uses, and returns how many panels it read.
func grafanaSchema(data []byte) (panels int, err error) {
	rt := cog.NewRuntime()
	rt.RegisterPanelcfgVariant(timeseries.VariantConfig())
	rt.RegisterPanelcfgVariant(stat.VariantConfig())
	rt.RegisterDataqueryVariant(grafanaprom.VariantConfig())
	// Grafana provisions dashboards from files, and imports them, in this
	// classic model; the SDK's v2 is the model of Grafana's new API.
	//lint:ignore SA1019 the classic model is the file format Grafana provisions
	var d dashboard.Dashboard
	err = d.UnmarshalJSONStrict(data)
	// The SDK returns its list of problems even when it is empty.
	if be := (cog.BuildErrors)(nil); errors.As(err, &be) && len(be) == 0 {
		err = nil
	}
	return len(d.Panels), err
}

// TestDashboardMatchesGrafanaSchema: inferrail.json decodes strictly
// against Grafana's schema: no field missing, misspelt or of the wrong
// type, in the dashboard, its panels' options and field config (time
// series and stat) or its Prometheus queries; and the check does refuse
// such mistakes.
func TestDashboardMatchesGrafanaSchema(t *testing.T) {
	n, err := grafanaSchema(JSON)
	if err != nil {
		t.Fatalf("inferrail.json against Grafana's dashboard schema: %v", err)
	}
	if want := len(loadDashboard(t).Panels); n != want {
		t.Errorf("%d panels decoded, inferrail.json has %d", n, want)
	}
	for _, tc := range []struct{ name, from, to string }{
		{"misspelt_query_field", `"legendFormat"`, `"legendFormt"`},
		{"misspelt_panel_option", `"tooltip"`, `"toolTip"`},
		{"stat_option_of_wrong_type", `"wideLayout": true`, `"wideLayout": "yes"`},
		{"unknown_dashboard_field", `"graphTooltip"`, `"graphTooltips"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := bytes.Replace(JSON, []byte(tc.from), []byte(tc.to), 1)
			if bytes.Equal(bad, JSON) {
				t.Fatalf("inferrail.json has no %s to change", tc.from)
			}
			if _, err := grafanaSchema(bad); err == nil {
				t.Errorf("%s changed to %s: the schema check accepted it", tc.from, tc.to)
			}
		})
	}
}
