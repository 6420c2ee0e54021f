package bench

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/harness"
	"github.com/inferrail/inferrail/internal/workload"
)

func TestParseSweepErrors(t *testing.T) {
	const point = "\n[[points]]\nworkload = \"w1\"\nrates = [1]\n"
	tests := []struct {
		name string
		toml string
		want []string // every one must appear in the error
	}{
		{"syntax", "replicas = = 3", []string{"line 1"}},
		{"unknown_key", "replicas = 3\nrplicas = 2\npolicies=[\"p2c\"]\nduration=\"1s\"" + point, []string{"rplicas"}},
		{"unknown_point_key", "policies=[\"p2c\"]\nduration=\"1s\"\n[[points]]\nworkload=\"w1\"\nrates=[1]\nrate=2\n", []string{"rate"}},
		{"bad_duration", "duration = \"soon\"\npolicies=[\"p2c\"]" + point, []string{"soon"}},
		{"wrong_type", "replicas = \"three\"\npolicies=[\"p2c\"]\nduration=\"1s\"" + point, []string{"line 1", "Replicas"}},
		{"no_points", "policies=[\"p2c\"]\nduration=\"1s\"\n", []string{"points: at least one is required"}},
		{"everything_at_once", `
policies = ["p2c"]
warmup = "2"
[[points]]
workload = "w7"
rates = [0, 2]
arrivals = "gamma"
ramp = "weekly"
[[points]]
name = "w7"
workload = "w1"
policies = [""]
`, []string{
			"warmup:",
			`points[0].workload: must be one of`,
			"points[0].rates[0]: must be a finite number > 0, not 0",
			"points[0].cv: gamma arrivals need a cv > 0",
			`points[0].ramp: must be empty or diurnal, not "weekly"`,
			"points[0].duration: no duration or requests",
			`points[1].name: "w7" is also points[0]'s name`,
			"points[1].rates: at least one is required",
			"points[1].policies[0]: must not be empty",
		}},
		// A schedule is made whole before the run: rates = [1e308] ran
		// out of memory, and [inf] was planned as w1_rate-Inf.
		{"absurd_rates", "policies=[\"p2c\"]\nduration=\"60s\"\n[[points]]\nworkload=\"w6\"\nrates=[inf, nan, 1e308, 200000, 166666]\n" +
			"[[points]]\nname=\"many\"\nworkload=\"w1\"\nrates=[1]\nrequests=10000001\n", []string{
			"points[0].rates[0]: must be a finite number > 0, not +Inf", "points[0].rates[1]: must be a finite number > 0, not NaN",
			"points[0].rates[2]: 1e+308 req/s over 1m0s is past 1.8e+308 requests", "points[0].rates[3]: 200000 req/s over 1m0s is 1.2e+07 requests",
			"points[1].requests: 10000001 is more than the 10000000 requests a run may make"}},
		{"no_policies", "duration=\"1s\"" + point, []string{"points[0].policies: no policies here or in the shared settings"}},
		{"max_prompt_w1", "policies=[\"p2c\"]\nduration=\"1s\"" + point + "max_prompt_tokens = 100\n", []string{"points[0].max_prompt_tokens: only for w2, w3 and trace"}},
		{"slow_speedup", "speedup = 0.5\npolicies=[\"p2c\"]\nduration=\"1s\"" + point, []string{"speedup: must be within 1-1000, not 0.5"}},
		{"fleet_sizes", "policies=[\"p2c\"]\nduration=\"1s\"" + point + "replicas = [2, 0, 65, 2]\n", []string{
			"points[0].replicas[1]: must be within 1-64, not 0", "points[0].replicas[2]: must be within 1-64, not 65",
			"points[0].replicas[3]: 2 is listed twice"}},
		// A plan is made whole before the first run: reps = 1e9 grew it to
		// gigabytes.
		{"reps_huge", "reps = 1000000000\npolicies=[\"p2c\"]\nduration=\"1s\"" + point + "reps = 1001\n", []string{
			"reps: must be within 1-1000, not 1000000000", "points[0].reps: must be within 1-1000, not 1001"}},
		// A sweep refuses at load what its runs would refuse one by one
		// (timeout = "300h" failed at its first run; replicas = 5000
		// started as many simulators).
		{"past_result_bounds", "timeout = \"300h\"\nslo_tpot = \"300h\"\nreplicas = 65\npolicies=[\"p2c\"]\nduration=\"1s\"" + point + "slo_ttft = \"300h\"\nduration = \"300h\"\n", []string{
			"timeout: must be at most 277h46m40s, not 300h0m0s", "slo_tpot: must be at most", "replicas: must be within 1-64, not 65",
			"points[0].slo_ttft: must be at most", "points[0].duration: must be at most"}},
		{"reps_negative", "reps = -1\npolicies=[\"p2c\"]\nduration=\"1s\"" + point, []string{"reps: must be within 1-1000, not -1"}},
		// 26 rates × 1000 reps × 2 policies × 2 index modes, and a small
		// point beside it.
		{"plan_too_large", "reps = 1000\npolicies=[\"p2c\", \"random\"]\nindex=[\"approximate\", \"exact\"]\nduration=\"1s\"" +
			"\n[[points]]\nworkload = \"w2\"\nrates = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26]\n" + point, []string{
			"points: the plan has 108000 runs, more than 100000: points[0] alone has 104000"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseSweep([]byte(tt.toml))
			if err == nil {
				t.Fatalf("ParseSweep accepted:\n%s", tt.toml)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestSweepPlanOrder(t *testing.T) {
	f, err := ParseSweep([]byte(`
out = "bench/results/x"
policies = ["round_robin", "cost_model"]
reps = 2
seed = 7
duration = "30s"
warmup = "5s"
sim_args = ["--max-num-seqs", "64"]
slo_ttft = "1s"
speedup = 4

[[points]]
workload = "w1"
rates = [2, 4]
system_prompts = 32

[[points]]
name = "w8-cv4"
workload = "w8"
rates = [5]
reps = 1
arrivals = "gamma"
cv = 4
ramp = "diurnal"
policies = ["kv_aware"]
sim_args = []

[[points]]
workload = "trace"
rates = [2]
max_prompt_tokens = 30000
`))
	if err != nil {
		t.Fatal(err)
	}
	runs, skipped := f.Plan(PlanOptions{})
	if len(skipped) != 1 || !strings.Contains(skipped[0], "--trace") {
		t.Errorf("skipped %v, want the trace point", skipped)
	}
	var names []string
	for _, r := range runs {
		names = append(names, r.FileName())
	}
	want := []string{
		"w1_rate2_rep0_round_robin.json", "w1_rate2_rep0_cost_model.json",
		"w1_rate2_rep1_round_robin.json", "w1_rate2_rep1_cost_model.json",
		"w1_rate4_rep0_round_robin.json", "w1_rate4_rep0_cost_model.json",
		"w1_rate4_rep1_round_robin.json", "w1_rate4_rep1_cost_model.json",
		"w8-cv4_rate5_rep0_kv_aware.json",
	}
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Errorf("plan order:\n%s\nwant\n%s", strings.Join(names, "\n"), strings.Join(want, "\n"))
	}
	r := runs[3]
	if r.Workload.Seed != 8 || r.Workload.SystemPrompts != 32 || r.Workload.Duration != 30*time.Second || r.Warmup != "5s" ||
		r.SLO.TTFT != time.Second || r.SLO.TPOT != 100*time.Millisecond || r.Replicas != 3 || len(r.SimArgs) != 2 || r.Speedup != 4 {
		t.Errorf("run 3: %+v", r)
	}
	// Policies of one repetition see the same workload.
	if runs[0].Workload != runs[1].Workload || runs[0].Workload == runs[2].Workload {
		t.Errorf("workloads: policies of a repetition must share one, repetitions differ")
	}
	w8 := runs[8]
	if w8.Workload.Arrivals != "gamma" || w8.Workload.CV != 4 || w8.Workload.Ramp != "diurnal" || len(w8.SimArgs) != 0 {
		t.Errorf("w8 run: %+v", w8)
	}
	runs, _ = f.Plan(PlanOptions{TracePath: "/data/trace.jsonl"})
	tr := runs[len(runs)-1]
	if tr.Workload.TracePath != "/data/trace.jsonl" || tr.Workload.RateMultiplier != 2 || tr.Workload.MaxPromptTokens != 30000 || tr.FileName() != "trace_x2_rep1_cost_model.json" {
		t.Errorf("trace run: %+v, file %s", tr.Workload, tr.FileName())
	}
}

func TestRunSpecEqual(t *testing.T) {
	a := RunSpec{Policy: "p2c", Replicas: 3, Workload: workload.Spec{Workload: "w1", Rate: 0.3, Duration: time.Minute, Seed: 1}, SLO: DefaultSLO(), Warmup: "0.1"}
	b := a
	b.SimArgs = []string{} // the same as none
	if !a.Equal(&b) {
		t.Error("specs differing only in an empty slice are not equal")
	}
	// A spec read back from its result file equals the planned one.
	path := filepath.Join(t.TempDir(), a.FileName())
	if err := WriteRunResult(path, &RunResult{Spec: a}); err != nil {
		t.Fatal(err)
	}
	if !done(path, &a) {
		t.Error("a result file does not match the spec it was written from")
	}
	for _, change := range []func(s *RunSpec){
		func(s *RunSpec) { s.Workload.Seed = 2 },
		func(s *RunSpec) { s.Workload.Rate = math.Nextafter(0.3, 1) },
		func(s *RunSpec) { s.SimArgs = []string{"--max-num-seqs", "8"} },
		func(s *RunSpec) { s.Policy = "random" },
		func(s *RunSpec) { s.SLO.TPOT = time.Second },
	} {
		c := a
		change(&c)
		if a.Equal(&c) || done(path, &c) {
			t.Errorf("changed spec %+v equals the original", c)
		}
	}
	if err := os.WriteFile(path, []byte("{half"), 0o644); err != nil {
		t.Fatal(err)
	}
	if done(path, &a) {
		t.Error("a broken result file counts as done")
	}
}

// TestCommittedSweepFiles: every sweep file in the repository loads and
// plans valid runs, each writing a file of its own.
func TestCommittedSweepFiles(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "bench", "sweeps", "*.toml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no sweep files: %v", err)
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			f, err := LoadSweep(path)
			if err != nil {
				t.Fatal(err)
			}
			runs, _ := f.Plan(PlanOptions{TracePath: "trace.jsonl"})
			seen := map[string]bool{}
			for _, r := range runs {
				if err := r.Validate(); err != nil {
					t.Errorf("%s: %v", r.FileName(), err)
				}
				if seen[r.FileName()] {
					t.Errorf("two runs write %s", r.FileName())
				}
				seen[r.FileName()] = true
			}
			if n, _, _ := f.planSize(); n != float64(len(runs)) {
				t.Errorf("checkPlanSize counts %.0f runs, Plan makes %d", n, len(runs))
			}
			t.Logf("%d runs", len(runs))
		})
	}
}

// A sweep's index modes run innermost after each policy, a point's
// replacing the file's; a peer router runs once.
func TestSweepPlanIndex(t *testing.T) {
	f, err := ParseSweep([]byte(`
policies = ["cost_model", "peer:vllm-router:round_robin"]
requests = 100
index = ["approximate", "exact"]

[[points]]
workload = "w1"
rates = [2]

[[points]]
workload = "w2"
rates = [3]
index = ["auto"]
`))
	if err != nil {
		t.Fatal(err)
	}
	runs, _ := f.Plan(PlanOptions{})
	var got []string
	for _, r := range runs {
		got = append(got, r.FileName())
		if err := r.Validate(); err != nil {
			t.Errorf("%s: %v", r.FileName(), err)
		}
	}
	want := []string{"w1_rate2_rep0_cost_model.json", "w1_rate2_rep0_cost_model_exact.json", "w1_rate2_rep0_peer-vllm-router-round_robin.json",
		"w2_rate3_rep0_cost_model_auto.json", "w2_rate3_rep0_peer-vllm-router-round_robin.json"}
	if !slices.Equal(got, want) {
		t.Errorf("plan %v, want %v", got, want)
	}
	if _, err := ParseSweep([]byte("policies = [\"cost_model\"]\nrequests = 1\nindex = [\"fast\"]\n[[points]]\nworkload = \"w1\"\nrates = [1]\n")); err == nil ||
		!strings.Contains(err.Error(), `index[0]: must be approximate, exact or auto, not "fast"`) {
		t.Errorf("bad index: %v", err)
	}
}

// A sweep's gateway counts run innermost after the index mode; one gateway
// is the run as before the option; a peer router runs alone.
func TestSweepPlanGateways(t *testing.T) {
	f, err := ParseSweep([]byte(`
policies = ["cost_model", "peer:vllm-router:round_robin"]
requests = 100
index = ["approximate", "exact"]
gateways = [1, 2]

[[points]]
workload = "w1"
rates = [2]
`))
	if err != nil {
		t.Fatal(err)
	}
	runs, _ := f.Plan(PlanOptions{})
	var got []string
	for _, r := range runs {
		got = append(got, r.FileName())
		if err := r.Validate(); err != nil {
			t.Errorf("%s: %v", r.FileName(), err)
		}
	}
	want := []string{"w1_rate2_rep0_cost_model.json", "w1_rate2_rep0_cost_model_gw2.json",
		"w1_rate2_rep0_cost_model_exact.json", "w1_rate2_rep0_cost_model_exact_gw2.json",
		"w1_rate2_rep0_peer-vllm-router-round_robin.json"}
	if !slices.Equal(got, want) {
		t.Errorf("plan %v, want %v", got, want)
	}
	if runs[1].Gateways != 2 || runs[0].Gateways != 0 || policyLabel(&runs[3]) != "cost_model (exact, 2 gateways)" {
		t.Errorf("gateways %d, %d; label %q", runs[0].Gateways, runs[1].Gateways, policyLabel(&runs[3]))
	}
	if _, err := ParseSweep([]byte("policies = [\"cost_model\"]\nrequests = 1\ngateways = [0]\n[[points]]\nworkload = \"w1\"\nrates = [1]\n")); err == nil ||
		!strings.Contains(err.Error(), "gateways[0]: must be within 1-16, not 0") {
		t.Errorf("bad gateways: %v", err)
	}
	s := runs[1]
	s.Policy = "peer:vllm-router:round_robin"
	if err := s.Validate(); err == nil || !strings.Contains(err.Error(), "gateways: several only for gateways of the run's own") {
		t.Errorf("two peer routers: %v", err)
	}
}

// TestSweepPlanFleetSizes: a point's replicas give each size a fleet of its
// own, named apart; a point without them runs on the file's size, its
// files named as before points could size fleets.
func TestSweepPlanFleetSizes(t *testing.T) {
	f, err := ParseSweep([]byte(`
policies = ["round_robin", "cost_model"]
requests = 100

[[points]]
workload = "w1"
rates = [4]
replicas = [2, 3, 5]

[[points]]
workload = "w2"
rates = [9]
`))
	if err != nil {
		t.Fatal(err)
	}
	runs, _ := f.Plan(PlanOptions{})
	var got []string
	for _, r := range runs {
		got = append(got, fmt.Sprintf("%s:%d", r.FileName(), r.Replicas))
		if err := r.Validate(); err != nil {
			t.Errorf("%s: %v", r.FileName(), err)
		}
	}
	want := []string{
		"w1_rate4_r2_rep0_round_robin.json:2", "w1_rate4_r2_rep0_cost_model.json:2",
		"w1_rate4_r3_rep0_round_robin.json:3", "w1_rate4_r3_rep0_cost_model.json:3",
		"w1_rate4_r5_rep0_round_robin.json:5", "w1_rate4_r5_rep0_cost_model.json:5",
		"w2_rate9_rep0_round_robin.json:3", "w2_rate9_rep0_cost_model.json:3",
	}
	if !slices.Equal(got, want) {
		t.Errorf("plan:\n%v\nwant\n%v", got, want)
	}
}

// TestSweepPointSLO: a point's slo_ttft is its runs' TTFT target; the
// other points keep the file's, and every point the file's TPOT target.
func TestSweepPointSLO(t *testing.T) {
	f, err := ParseSweep([]byte(`
policies = ["p2c"]
requests = 10
slo_ttft = "2s"
slo_tpot = "50ms"

[[points]]
workload = "w1"
rates = [4]

[[points]]
workload = "w2"
rates = [9]
slo_ttft = "6s"
`))
	if err != nil {
		t.Fatal(err)
	}
	runs, _ := f.Plan(PlanOptions{})
	want := map[string]SLO{"w1": {TTFT: 2 * time.Second, TPOT: 50 * time.Millisecond}, "w2": {TTFT: 6 * time.Second, TPOT: 50 * time.Millisecond}}
	if len(runs) != 2 {
		t.Fatalf("%d runs, want 2", len(runs))
	}
	for _, r := range runs {
		if r.SLO != want[r.Point] {
			t.Errorf("%s: SLO %+v, want %+v", r.FileName(), r.SLO, want[r.Point])
		}
	}
	if _, err := ParseSweep([]byte("policies = [\"p2c\"]\nrequests = 10\n[[points]]\nworkload = \"w1\"\nrates = [4]\nslo_ttft = \"-1s\"\n")); err == nil || !strings.Contains(err.Error(), "points[0].slo_ttft: must not be negative") {
		t.Errorf("a negative slo_ttft: %v", err)
	}
}

// TestGatewayPatch: a run's gateway patch names itself in the file name,
// is refused where there is no gateway of the run's own or no name, and
// changes the generated config, before the speedup scales its times.
func TestGatewayPatch(t *testing.T) {
	s := RunSpec{Policy: "cost_model", Replicas: 3, SLO: SLO{TTFT: time.Second, TPOT: time.Second}, Workload: workload.Spec{Workload: "w2", Rate: 12, Duration: time.Minute},
		GatewayPatch: `{"routing":{"session_affinity":true,"hot_prefix":{"window":"8s"}}}`, Variant: "sessions"}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := s.FileName(); got != "w2_rate12_rep0_cost_model_sessions.json" {
		t.Errorf("file name %q", got)
	}
	bad := []struct {
		name, want string
		edit       func(*RunSpec)
	}{
		{"peer", "gateway_patch: only for a gateway of the run's own", func(s *RunSpec) { s.Policy = "peer:vllm-router:cache_aware" }},
		{"no name", "variant: a gateway patch needs a name", func(s *RunSpec) { s.Variant = "" }},
		{"not an object", "gateway_patch: must be a JSON object", func(s *RunSpec) { s.GatewayPatch = `[1]` }},
		{"null", "gateway_patch: must be a JSON object", func(s *RunSpec) { s.GatewayPatch = `null` }},
		{"name without patch", "variant: names a gateway patch", func(s *RunSpec) { s.GatewayPatch = "" }},
	}
	for _, b := range bad {
		c := s
		b.edit(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%s: %v, want %q", b.name, err, b.want)
		}
	}
	replicas := []harness.Replica{{ID: "sim-1", URL: "http://127.0.0.1:1"}}
	o := FleetOptions{Policy: "cost_model", Model: "inferrail/sim-8b", Speedup: 4, GatewayPatch: s.GatewayPatch}
	cfg, err := fleetConfig(o, replicas)
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Routing.SessionAffinity || time.Duration(cfg.Routing.HotPrefix.Window) != 2*time.Second {
		t.Errorf("patched config: session affinity %v, hot window %v (want true, 8s/4)", cfg.Routing.SessionAffinity, time.Duration(cfg.Routing.HotPrefix.Window))
	}
	o.GatewayPatch = `{"routing":{"no_such_key":1}}`
	if _, err := fleetConfig(o, replicas); err == nil || !strings.Contains(err.Error(), "no_such_key") {
		t.Errorf("unknown key: %v", err)
	}
}

// TestSweepVariants: a variant runs right after its policy's run with the
// defaults, under its patch, named in the file name and the report's
// label; peers and other policies run once; a variant no run could take
// is refused with its path.
func TestSweepVariants(t *testing.T) {
	f, err := ParseSweep([]byte(`
policies = ["round_robin", "cost_model", "peer:vllm-router:cache_aware"]
requests = 100

[[variants]]
name = "sessions"
policies = ["cost_model"]
gateway_patch = '{"routing":{"session_affinity":true}}'

[[variants]]
name = "no-pace"
policies = ["cost_model", "round_robin"]
gateway_patch = '{"routing":{"pace":false}}'

[[points]]
workload = "w2"
rates = [12]
`))
	if err != nil {
		t.Fatal(err)
	}
	runs, _ := f.Plan(PlanOptions{})
	var names, labels []string
	for _, r := range runs {
		names = append(names, r.FileName())
		labels = append(labels, policyLabel(&r))
		if err := r.Validate(); err != nil {
			t.Errorf("%s: %v", r.FileName(), err)
		}
	}
	want := []string{"w2_rate12_rep0_round_robin.json", "w2_rate12_rep0_round_robin_no-pace.json",
		"w2_rate12_rep0_cost_model.json", "w2_rate12_rep0_cost_model_sessions.json", "w2_rate12_rep0_cost_model_no-pace.json",
		"w2_rate12_rep0_peer-vllm-router-cache_aware.json"}
	if !slices.Equal(names, want) {
		t.Errorf("plan %v, want %v", names, want)
	}
	if labels[3] != "cost_model (sessions)" || labels[2] != "cost_model" {
		t.Errorf("labels %v", labels)
	}
	if runs[3].GatewayPatch != `{"routing":{"session_affinity":true}}` || runs[2].GatewayPatch != "" {
		t.Errorf("patches %q, %q", runs[2].GatewayPatch, runs[3].GatewayPatch)
	}

	bad := []struct{ variant, want string }{
		{`name = ""` + "\npolicies = [\"cost_model\"]\ngateway_patch = '{}'", "variants[0]: name: required"},
		{`name = "a b"` + "\npolicies = [\"cost_model\"]\ngateway_patch = '{}'", `variants[0]: name: letters, digits and '-' only, not "a b"`},
		{`name = "x"` + "\npolicies = []\ngateway_patch = '{}'", "variants[0]: policies: at least one is required"},
		{`name = "x"` + "\npolicies = [\"peer:vllm-router:cache_aware\"]\ngateway_patch = '{}'", "is a peer router"},
		{`name = "x"` + "\npolicies = [\"kv_aware\"]\ngateway_patch = '{}'", "kv_aware is not among the policies the sweep runs"},
		{`name = "x"` + "\npolicies = [\"cost_model\"]\ngateway_patch = '[1]'", "variants[0]: gateway_patch: must be a JSON object"},
	}
	for _, b := range bad {
		doc := "policies = [\"cost_model\"]\nrequests = 1\n[[variants]]\n" + b.variant + "\n[[points]]\nworkload = \"w1\"\nrates = [1]\n"
		if _, err := ParseSweep([]byte(doc)); err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%s: %v, want %q", b.variant, err, b.want)
		}
	}
	twice := "policies = [\"cost_model\"]\nrequests = 1\n[[variants]]\nname = \"x\"\npolicies = [\"cost_model\"]\ngateway_patch = '{}'\n" +
		"[[variants]]\nname = \"x\"\npolicies = [\"cost_model\"]\ngateway_patch = '{}'\n[[points]]\nworkload = \"w1\"\nrates = [1]\n"
	if _, err := ParseSweep([]byte(twice)); err == nil || !strings.Contains(err.Error(), `variants[1]: name: "x" is used twice`) {
		t.Errorf("a name twice: %v", err)
	}
}

// Sweep's errors say whose runs they are: a comparison's are not a sweep's.
func TestSweepErrorsName(t *testing.T) {
	spec := RunSpec{Policy: "round_robin", Replicas: 1, Warmup: "0", SLO: DefaultSLO(),
		Workload: workload.Spec{Workload: "w1", Model: "m", Rate: 1, Requests: 1}}
	for _, tt := range []struct{ name, want string }{{"", "sweep: two runs write"}, {"compare", "compare: two runs write"}} {
		_, err := Sweep(t.Context(), []RunSpec{spec, spec}, SweepOptions{Out: t.TempDir(), Name: tt.name}, RunEnv{})
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("name %q: %v, want %q", tt.name, err, tt.want)
		}
	}
}
