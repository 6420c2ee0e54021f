package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/bench"
	"github.com/inferrail/inferrail/internal/measure"
	"github.com/inferrail/inferrail/internal/procs/procstest"
	"github.com/inferrail/inferrail/internal/stress/engine"
	"github.com/inferrail/inferrail/internal/stress/gateway"
	"github.com/inferrail/inferrail/internal/workload"
)

// TestMain lets the test binary act as the simulator children the stress
// command starts.
func TestMain(m *testing.M) { procstest.Main(m) }

// runArgs runs the command line args and returns what it wrote.
func runArgs(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err = run(t.Context(), args, &out, &errOut)
	return out.String(), errOut.String(), err
}

func TestHelp(t *testing.T) {
	for _, h := range []string{"help", "-h", "--help"} {
		out, _, err := runArgs(t, h)
		if err != nil || out != usage {
			t.Errorf("%s: %v, stdout %q; want the usage", h, err, out)
		}
	}
	if _, errOut, err := runArgs(t); err == nil || err.Error() != "no command given" || errOut != usage {
		t.Errorf("no command: %v, stderr %q", err, errOut)
	}
	if _, errOut, err := runArgs(t, "bogus"); err == nil || err.Error() != `unknown command "bogus"` || errOut != usage {
		t.Errorf("unknown command: %v, stderr %q", err, errOut)
	}
	for name := range commands {
		if !strings.Contains(usage, "\n  "+name) {
			t.Errorf("the usage does not list %s", name)
		}
	}
}

// Each command's -h lists its flags on stderr and stops with flag.ErrHelp;
// the stress commands' list their scenarios.
func TestCommandHelp(t *testing.T) {
	tests := map[string][]string{
		"run":          {"-workload", "-rate", "-policy", "-url", "-sim-binary", "-out"},
		"compare":      {"-policies", "-reps", "-jobs"},
		"sweep":        {"-file", "-jobs", "-reuse", "-n"},
		"report":       {"-in", "-out"},
		"tail":         {"-outcomes", "-decisions", "-top", "-miss", "-speedup"},
		"stress":       append([]string{"-sim-binary", "-soak-requests"}, engine.Scenarios...),
		"gwstress":     append([]string{"-gateway-binary", "-routing-variants"}, gateway.Scenarios...),
		"demo":         {"-rate", "-policies"},
		"plain-proxy":  {"-upstreams"},
		"fake-engines": {"-pages", "-huge-bytes"},
		"testcerts":    {"-dir"},
	}
	for name, want := range tests {
		t.Run(name, func(t *testing.T) {
			_, errOut, err := runArgs(t, name, "-h")
			if !errors.Is(err, flag.ErrHelp) {
				t.Errorf("error %v, want flag.ErrHelp", err)
			}
			for _, w := range want {
				if !strings.Contains(errOut, w) {
					t.Errorf("help lacks %q:\n%s", w, errOut)
				}
			}
		})
	}
}

// Arguments that cannot run are refused with a message naming the
// command and the problem, before anything starts.
func TestArgumentErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"report"}, "report: --in and --out are required, and nothing else"},
		{[]string{"report", "--in", "a", "--out", "b", "extra"}, "report: --in and --out are required, and nothing else"},
		{[]string{"sweep"}, "sweep: --file is required"},
		{[]string{"sweep", "--file", "x.toml", "extra"}, `sweep: unexpected argument "extra"`},
		{[]string{"stress", "--scenarios", " , "}, "stress: --scenarios: name at least one scenario"},
		{[]string{"stress", "extra"}, `stress: unexpected argument "extra"`},
		{[]string{"stress", "--scenarios", "sim-soak,nope"}, `scenarios[1]: unknown scenario "nope" (known: sim-streams, sim-soak, kv-mirror)`},
		{[]string{"gwstress", "--scenarios", ""}, "gwstress: --scenarios: name at least one scenario"},
		{[]string{"gwstress", "--routing-rates", "100,x"}, `gwstress: --routing-rates: "x" is not a number`},
		{[]string{"gwstress", "--routing-variants", "bogus"}, "gwstress: --routing-variants: "},
		{[]string{"gwstress", "--scenarios", "gw-kill", "--gateway-binary", ""}, "gateway_binary: required"},
		{[]string{"run", "--url", "http://127.0.0.1:1", "--", "--max-num-seqs", "4"}, "run: simulator flags after -- need a fleet of the run's own; drop --url"},
		{[]string{"run", "--rate", "-1"}, "run: "},
		{[]string{"run", "--max-prompt-tokens", "100"}, "max_prompt_tokens: only for w2, w3 and trace"},
		{[]string{"run", "--workload", "w2", "--max-prompt-tokens", "-1"}, "max_prompt_tokens: must be >= 0"},
		{[]string{"run", "--index", "fast"}, `run: index: must be approximate, exact or auto, not "fast"`},
		{[]string{"run", "--index", "exact", "--policy", "peer:vllm-router:round_robin"}, "run: index: only for a gateway of the run's own"},
		// Bounds of a result file, which report and sweep's resume read back.
		{[]string{"run", "--timeout", "300h"}, "run: timeout: 300h0m0s is outside [0s, 277h46m40s]"},
		{[]string{"run", "--duration", "300h"}, "run: workload.duration: 300h0m0s is outside [0s, 277h46m40s]"},
		{[]string{"run", "--slo-ttft", "300h"}, "run: slo.ttft: 300h0m0s is outside [0s, 277h46m40s]"},
		{[]string{"run", "--rate", "2e9", "--requests", "3"}, "run: workload.rate: 2e+09 is outside [0, 1e+09]"},
		{[]string{"compare", "--timeout", "300h"}, "compare: timeout: 300h0m0s is outside"},
		{[]string{"compare", "--url", "http://127.0.0.1:1"}, "compare: a comparison starts its own fleets; drop --url"},
		{[]string{"compare", "--policies", " , "}, "compare: name at least one policy and at least one repetition"},
		{[]string{"demo", "extra"}, `demo: unexpected argument "extra"`},
		{[]string{"tail"}, "tail: --outcomes is required, and no arguments"},
		{[]string{"tail", "--outcomes", "o.jsonl", "extra"}, "tail: --outcomes is required, and no arguments"},
		{[]string{"tail", "--outcomes", "o.jsonl", "--miss", "0"}, "tail: --top must be >= 0, --miss in (0, 1] and --speedup 0 or >= 1"},
		{[]string{"tail", "--outcomes", "o.jsonl", "--speedup", "0.5"}, "tail: --top must be >= 0, --miss in (0, 1] and --speedup 0 or >= 1"},
		{[]string{"tail", "--outcomes", filepath.Join(os.TempDir(), "no-such-dir-inferrail", "o.jsonl")}, "tail: open "},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			_, _, err := runArgs(t, tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

// The stress commands' flags land in their configs, and the command line
// is recorded as the one that reproduces the results.
func TestStressFlags(t *testing.T) {
	c, err := stressConfig([]string{"--scenarios", "sim-soak", "--soak-requests", "500", "--max-num-seqs", "8", "--out", "some dir"}, new(bytes.Buffer))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c.Scenarios, []string{"sim-soak"}) || c.Soak.Requests != 500 || c.MaxNumSeqs != 8 || c.OutDir != "some dir" ||
		c.Command != commandLine("stress", nil)+" --scenarios sim-soak --soak-requests 500 --max-num-seqs 8 --out 'some dir'" {
		t.Errorf("config %+v", c)
	}
	g, err := gwstressConfig([]string{"--scenarios", "gw-routing, gw-soak", "--routing-variants", "w200-tok-kv_aware-r2", "--routing-rates", "100,300"}, new(bytes.Buffer))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g.Scenarios, []string{"gw-routing", "gw-soak"}) || len(g.Routing.Variants) != 1 ||
		g.Routing.Variants[0].Name() != "w200-tok-kv_aware-r2" || !reflect.DeepEqual(g.Routing.Variants[0].Rates, []int{100, 300}) {
		t.Errorf("gwstress config: scenarios %v, routing variants %+v", g.Scenarios, g.Routing.Variants)
	}
	if g.BenchBinary == "" {
		t.Error("gw-floor's plain proxy is not this binary")
	}
}

// report turns a directory of result files into report.md.
func TestReport(t *testing.T) {
	in, out := t.TempDir(), filepath.Join(t.TempDir(), "report")
	for i, policy := range []string{"round_robin", "least_request"} {
		k := float64(i + 1)
		r := &bench.RunResult{
			Spec: bench.RunSpec{Policy: policy, Replicas: 3, Warmup: "0.1", SLO: bench.DefaultSLO(),
				Workload: workload.Spec{Workload: "w1", Rate: 4, Duration: time.Minute, Seed: 1}},
			Environment: measure.Environment{GitCommit: "abc123", GoVersion: "go1.27.3", GOOS: "linux", GOARCH: "amd64", NumCPU: 2},
			Measurements: bench.Measurements{Requests: 100, Warmup: 10, Measured: 90, Succeeded: 90,
				TTFT: measure.Percentiles{N: 90, P50: 0.05 * k, P99: 0.5 * k}, E2E: measure.Percentiles{N: 90, P50: 0.5 * k, P99: 2 * k},
				GoodputRPS: 4 / k, GoodFraction: 1 / k, ThroughputRPS: 4, HitRate: 0.5 / k},
		}
		if err := bench.WriteRunResult(filepath.Join(in, r.Spec.FileName()), r); err != nil {
			t.Fatal(err)
		}
	}
	stdout, _, err := runArgs(t, "report", "--in", in, "--out", out)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(out, "report.md")
	if stdout != "report written to "+path+"\n" {
		t.Errorf("stdout %q", stdout)
	}
	md, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"round_robin", "least_request", "w1"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
}

// report passes over a *.json that is not a regular file, with a warning
// naming it, and reports the results beside it: a FIFO once blocked it
// forever.
func TestReportSkipsAFIFO(t *testing.T) {
	in, out := t.TempDir(), filepath.Join(t.TempDir(), "report")
	r := &bench.RunResult{Spec: bench.RunSpec{Policy: "round_robin", Replicas: 3, Warmup: "0.1", SLO: bench.DefaultSLO(),
		Workload: workload.Spec{Workload: "w1", Rate: 4, Duration: time.Minute, Seed: 1}}}
	if err := bench.WriteRunResult(filepath.Join(in, r.Spec.FileName()), r); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(in, "x.json")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	type ran struct {
		stderr string
		err    error
	}
	done := make(chan ran, 1)
	go func() {
		_, stderr, err := runArgs(t, "report", "--in", in, "--out", out)
		done <- ran{stderr, err}
	}()
	select {
	case r := <-done:
		if r.err != nil || r.stderr != "warning: "+fifo+": not a regular file (a named pipe); skipped\n" {
			t.Errorf("report: %v, stderr %q; want a warning naming %s", r.err, r.stderr, fifo)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("report did not return within 10 s")
	}
	if md, err := os.ReadFile(filepath.Join(out, "report.md")); err != nil || !strings.Contains(string(md), "round_robin") {
		t.Errorf("report.md: %v", err)
	}
}

// sweep -n prints the plan of the smoke sweep and starts nothing.
func TestSweepPlan(t *testing.T) {
	stdout, _, err := runArgs(t, "sweep", "-n", "--file", filepath.Join("..", "..", "bench", "sweeps", "smoke.toml"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 3 || lines[2] != "2 runs" || !strings.HasSuffix(lines[0], ".json") || !strings.Contains(lines[0], "round_robin") {
		t.Errorf("plan:\n%s\nwant the two runs of the smoke sweep, round_robin first", stdout)
	}
}

// stress runs the simulator scenarios against real children and writes
// their results, recording the command line that reproduces them.
func TestStressCommand(t *testing.T) {
	for _, kv := range procstest.SimEnv() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v) // the children inherit it: the test binary acts as the simulator
	}
	out := t.TempDir()
	args := []string{"--sim-binary", os.Args[0], "--out", out, "--streams", "8", "--stream-max-tokens", "4",
		"--soak-requests", "40", "--soak-warmup", "10", "--soak-concurrency", "4", "--soak-sample-every", "10",
		"--kv-requests", "300", "--kv-rate", "600", "--kv-blocks", "512", "--kv-buffer-steps", "1000", "--kv-replay-check", "100"}
	stdout, stderr, err := runArgs(t, append([]string{"stress"}, args...)...)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	if stdout != "results and report written to "+out+"\n" {
		t.Errorf("stdout %q", stdout)
	}
	b, err := os.ReadFile(filepath.Join(out, engine.ScenarioStreams+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var res engine.Result
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	if res.Command != commandLine("stress", args) || len(res.Runs) != 2 {
		t.Errorf("sim-streams: command %q, %d runs", res.Command, len(res.Runs))
	}
	for _, run := range res.Runs {
		if f := run.Streams; f == nil || f.Completed != 8 || f.Errors != 0 {
			t.Errorf("%s: %+v", run.Variant, run.Streams)
		}
	}
	for _, name := range []string{engine.ScenarioSoak + ".json", engine.ScenarioKVMirror + ".json", "README.md"} {
		if _, err := os.Stat(filepath.Join(out, name)); err != nil {
			t.Error(err)
		}
	}
}

func TestShellJoin(t *testing.T) {
	got := shellJoin([]string{"--out", "bench/results/sim", "--scenarios", "a,b", "it's", "", "x y"})
	if want := `--out bench/results/sim --scenarios a,b 'it'\''s' '' 'x y'`; got != want {
		t.Errorf("shellJoin = %s, want %s", got, want)
	}
}

// --index lands in the spec, approximate as the runs before the option.
func TestIndexFlag(t *testing.T) {
	for _, tt := range []struct{ arg, want string }{{"", ""}, {"approximate", ""}, {"exact", "exact"}, {"auto", "auto"}} {
		fs, spec, _ := runFlags("run", "", new(bytes.Buffer))
		args := []string{"--policy", "cost_model"}
		if tt.arg != "" {
			args = append(args, "--index", tt.arg)
		}
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		s, err := spec(t.Context(), nil)
		if err != nil || s.Index != tt.want {
			t.Errorf("--index %q: spec index %q, %v; want %q", tt.arg, s.Index, err, tt.want)
		}
	}
}

// --gateways lands in the spec, one as the runs before the option.
func TestGatewaysFlag(t *testing.T) {
	for _, tt := range []struct {
		arg  string
		want int
	}{{"", 0}, {"1", 0}, {"2", 2}} {
		fs, spec, _ := runFlags("run", "", new(bytes.Buffer))
		args := []string{"--policy", "cost_model"}
		if tt.arg != "" {
			args = append(args, "--gateways", tt.arg)
		}
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		s, err := spec(t.Context(), nil)
		if err != nil || s.Gateways != tt.want {
			t.Errorf("--gateways %q: spec gateways %d, %v; want %d", tt.arg, s.Gateways, err, tt.want)
		}
	}
}

// TestTestCerts: testcerts writes a CA and a server certificate it signed
// that a TLS client trusting the CA verifies for 127.0.0.1 and localhost.
func TestTestCerts(t *testing.T) {
	dir := t.TempDir()
	if _, _, err := runArgs(t, "testcerts", "-dir", dir); err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key"))
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatal("ca.pem holds no certificate")
	}
	for _, name := range []string{"127.0.0.1", "localhost"} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: name}); err != nil {
			t.Errorf("verify for %s: %v", name, err)
		}
	}
	if _, _, err := runArgs(t, "testcerts"); err == nil {
		t.Error("testcerts without --dir succeeded")
	}
}

// A trace whose lines all name one model and one block size (a traffic
// capture's) sets the replay's model and the simulators' block size,
// unless flags set them.
func TestTraceShapeFlags(t *testing.T) {
	path := filepath.Join(t.TempDir(), "capture.jsonl")
	line := `{"timestamp":%d,"input_length":40,"output_length":2,"hash_ids":[0,1],"model":"org/m","block_size":32}` + "\n"
	if err := os.WriteFile(path, []byte(fmt.Sprintf(line, 0)+fmt.Sprintf(line, 5)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name      string
		args, sim []string
		model     string
		simArgs   []string
	}{
		{"from_the_trace", nil, nil, "org/m", []string{"--block-size=32"}},
		{"model_flag", []string{"--model", "mine"}, nil, "mine", []string{"--block-size=32"}},
		{"max_prompt_tokens", []string{"--max-prompt-tokens", "30000"}, nil, "org/m", []string{"--block-size=32"}},
		{"block_size_flag", nil, []string{"--block-size", "16"}, "org/m", []string{"--block-size", "16"}},
		// A fleet at --url is what it is: the capture's block size sets no flag.
		{"url", []string{"--url", "http://127.0.0.1:1"}, nil, "org/m", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fs, spec, _ := runFlags("run", "", new(bytes.Buffer))
			if err := fs.Parse(append([]string{"--workload", "trace", "--trace", path}, tt.args...)); err != nil {
				t.Fatal(err)
			}
			s, err := spec(t.Context(), tt.sim)
			if err != nil || s.Workload.Model != tt.model || !slices.Equal(s.SimArgs, tt.simArgs) {
				t.Errorf("model %q, sim args %q, %v; want %q, %q", s.Workload.Model, s.SimArgs, err, tt.model, tt.simArgs)
			}
			if want := slices.Contains(tt.args, "--max-prompt-tokens"); (s.Workload.MaxPromptTokens == 30000) != want {
				t.Errorf("max prompt tokens %d with flags %q", s.Workload.MaxPromptTokens, tt.args)
			}
		})
	}
	fs, spec, _ := runFlags("run", "", new(bytes.Buffer))
	if err := fs.Parse([]string{"--policy", "cost_model", "--workload", "trace", "--trace", path + ".missing"}); err != nil {
		t.Fatal(err)
	}
	if _, err := spec(t.Context(), nil); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("a missing trace: %v", err)
	}

}

// The trace is read once, when the flags are: a pipe or a FIFO has no
// second reading, here a file gone once read.
func TestTraceReadOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace.jsonl")
	line := `{"timestamp":%d,"input_length":40,"output_length":2,"hash_ids":[0,1]}` + "\n"
	if err := os.WriteFile(path, []byte(fmt.Sprintf(line, 0)+fmt.Sprintf(line, 5)), 0o600); err != nil {
		t.Fatal(err)
	}
	fs, spec, ef := runFlags("run", "", new(bytes.Buffer))
	if err := fs.Parse([]string{"--url", "http://127.0.0.1:1", "--workload", "trace", "--trace", path}); err != nil {
		t.Fatal(err)
	}
	s, err := spec(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	env := ef.env(t.Context(), new(bytes.Buffer), "")
	if reqs, err := env.Generate(t.Context(), s.Workload); err != nil || reqs.Len() != 2 {
		t.Errorf("replay of the trace read: %v requests, %v", reqs, err)
	}
}
