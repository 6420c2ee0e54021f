package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/bench"
	"github.com/inferrail/inferrail/internal/sim"
)

// startSim is a simulator answering at once, for runs against --url.
func startSim(t *testing.T) string {
	t.Helper()
	cfg := sim.DefaultConfig()
	cfg.ZeroLatency = true
	l, err := sim.StartLocal(cfg, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return l.URL()
}

// urlRun is a short run against url writing to out, with args added.
func urlRun(t *testing.T, url, out string, args ...string) (stdout string, err error) {
	t.Helper()
	stdout, _, err = runArgs(t, append([]string{"run", "--url", url, "--requests", "4", "--rate", "50", "--warmup", "0",
		"--output-tokens", "2", "--out", out}, args...)...)
	return stdout, err
}

// A run in which every request failed shows no latencies, writes its
// result (the failures are the finding) and fails.
func TestRunNothingSucceeded(t *testing.T) {
	url, out := startSim(t), t.TempDir()
	stdout, err := urlRun(t, url, out, "--model", "no-such-model")
	if err == nil || !strings.Contains(err.Error(), "none of the 4 measured requests succeeded") {
		t.Errorf("error %v, want none succeeded", err)
	}
	if !strings.Contains(stdout, "TTFT, TPOT, ITL, e2e: n/a (no request succeeded)") || strings.Contains(stdout, "p50 0 ") {
		t.Errorf("summary:\n%s", stdout)
	}
	if _, err := urlRun(t, url, out); err != nil {
		t.Errorf("a run that succeeded: %v", err)
	}
}

// Flags only a fleet of the run's own reads are refused with --url, and
// counts that make no sense are refused anywhere.
func TestRefusedFlags(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"run", "--url", "http://127.0.0.1:1", "--capture", "c.jsonl"}, "--capture: only for a fleet of the run's own; drop --url"},
		{[]string{"run", "--url", "http://127.0.0.1:1", "--policy", "cost_model"}, "--policy: only for a fleet of the run's own"},
		{[]string{"run", "--url", "http://127.0.0.1:1", "--replicas", "9"}, "--replicas: only for a fleet of the run's own"},
		{[]string{"run", "--url", "http://127.0.0.1:1", "--sim-binary", "/x"}, "--sim-binary: only for a fleet of the run's own"},
		{[]string{"run", "--gateways", "0"}, "--gateways must be at least 1"},
		{[]string{"run", "--rate", "1e308", "--duration", "1s"}, "workload: 1e+308 req/s over 1s is 1e+308 requests, more than the 10000000"},
		{[]string{"run", "--rate", "+Inf", "--duration", "1s"}, "workload.rate: must be a finite number > 0"},
		{[]string{"compare", "--policy", "cost_model"}, "compare: --policy: name the policies with --policies"},
		{[]string{"compare", "--jobs", "-3"}, "compare: --jobs must be at least 1"},
		{[]string{"compare", "--reps", "1000000000"}, "compare: --reps must be at most 1000"},
		{[]string{"replay-check", "--policy", "cost_model", "--out", filepath.Join(os.TempDir(), "inferrail-refused-replay-check")},
			"replay-check: --policy: name the policies with --policies"},
		{[]string{"compare", "--gateways", "0"}, "--gateways must be at least 1"},
		{[]string{"sweep", "--file", "../../bench/sweeps/smoke.toml", "--reuse", "/nonexistent"}, "sweep: --reuse /nonexistent: not a directory"},
		{[]string{"sweep", "--file", "../../bench/sweeps/smoke.toml", "--jobs", "0"}, "sweep: --jobs must be at least 1"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			if _, _, err := runArgs(t, tt.args...); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want %q", err, tt.want)
			}
		})
	}
}

// An --outcomes path the run cannot write fails before the run, and an
// interrupted run writes no result.
func TestRunFailsEarly(t *testing.T) {
	url, out := startSim(t), t.TempDir()
	if _, err := urlRun(t, url, out, "--outcomes", filepath.Join(out, "missing", "o.jsonl")); err == nil ||
		!strings.HasPrefix(err.Error(), "run: --outcomes: ") {
		t.Errorf("an unwritable --outcomes: %v", err)
	}
	if names, _ := os.ReadDir(out); len(names) != 0 {
		t.Errorf("the run went ahead: %v", names)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	var stdout, stderr bytes.Buffer
	err := run(ctx, []string{"run", "--url", url, "--requests", "4", "--rate", "50", "--warmup", "0", "--out", out}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "no result written") {
		t.Errorf("an interrupted run: %v", err)
	}
	if names, _ := os.ReadDir(out); len(names) != 0 {
		t.Errorf("an interrupted run wrote %v", names)
	}
}

// An --out or --capture the run could not write fails before the run:
// --out was first written after the whole run, and a capture the gateway
// could not write let the run end well, saying "result written", with no
// capture. Nothing is left behind.
func TestUnwritablePathsFailEarly(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	taken := filepath.Join(dir, "taken.json")
	if err := os.Mkdir(taken, 0o755); err != nil {
		t.Fatal(err)
	}
	// A FIFO with no reader: writing to it would block, and the result,
	// renamed into place, replaced it with a regular file.
	fifo := filepath.Join(dir, "fifo.json")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"out_under_a_file", []string{"--out", filepath.Join(file, "results")}, "run: --out: mkdir " + file + ": not a directory"},
		{"out_file_under_a_file", []string{"--out", filepath.Join(file, "r.json")}, "run: --out: mkdir " + file + ": not a directory"},
		{"out_file_is_a_directory", []string{"--out", taken}, "run: --out: " + taken + ": not a regular file (a directory)"},
		{"out_file_is_a_fifo", []string{"--out", fifo}, "run: --out: " + fifo + ": not a regular file (a named pipe)"},
		// Opening the FIFO for writing blocked the run forever.
		{"outcomes_is_a_fifo", []string{"--outcomes", fifo}, "run: --outcomes: " + fifo + ": not a regular file (a named pipe)"},
		{"outcomes_is_a_device", []string{"--outcomes", os.DevNull}, "run: --outcomes: " + os.DevNull + ": not a regular file (a device)"},
		{"outcomes_is_a_directory", []string{"--outcomes", taken}, "run: --outcomes: " + taken + ": not a regular file (a directory)"},
		{"capture_under_a_file", []string{"--capture", filepath.Join(file, "c.jsonl")}, "run: --capture: capture " + file + "/c.jsonl: mkdir " + file + ": not a directory"},
		{"capture_is_a_directory", []string{"--capture", taken}, "run: --capture: capture: " + taken + " is a directory, not a regular file"},
		// The directories made for --out go again with a run that wrote nothing.
		{"out_made_and_removed", []string{"--out", filepath.Join(dir, "new", "results")}, "start " + filepath.Join(dir, "no-sim") + ": "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// No simulator binary: a run that went ahead would fail to
			// start its fleet, later and for another reason.
			args := append([]string{"run", "--sim-binary", filepath.Join(dir, "no-sim"), "--requests", "4", "--rate", "50", "--warmup", "0"}, tt.args...)
			if !slices.Contains(args, "--out") {
				args = append(args, "--out", filepath.Join(dir, "results"))
			}
			done := make(chan error, 1)
			go func() {
				_, _, err := runArgs(t, args...)
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
					t.Errorf("error %v, want %q", err, tt.want)
				}
			case <-time.After(time.Minute):
				t.Fatal("run did not return within a minute")
			}
			if names, _ := os.ReadDir(dir); len(names) != 3 {
				t.Errorf("the run left %v", names)
			}
		})
	}
}

// A run interrupted once its requests are going leaves neither a result
// nor an --outcomes file: the old code wrote the outcomes, the requests
// the stop cut off labelled status 200, error "timeout".
func TestInterruptedRunLeavesNoOutcomes(t *testing.T) {
	target, err := url.Parse(startSim(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.ErrorLog = log.New(io.Discard, "", 0) // the requests the stop cuts off
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/completions") {
			cancel() // the Ctrl-C, as the first request arrives
		}
		proxy.ServeHTTP(w, r)
	}))
	defer srv.Close()
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	err = run(ctx, []string{"run", "--url", srv.URL, "--requests", "8", "--rate", "20", "--warmup", "0", "--output-tokens", "2",
		"--out", filepath.Join(out, "new", "results"), "--outcomes", filepath.Join(out, "o.jsonl")}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "no result written") {
		t.Errorf("an interrupted run: %v", err)
	}
	if names, _ := os.ReadDir(out); len(names) != 0 {
		t.Errorf("an interrupted run left %v", names)
	}
}

// tail names the file it could not read, and warns of one that holds no
// outcomes.
func TestTailNamesItsFiles(t *testing.T) {
	dir := t.TempDir()
	long := filepath.Join(dir, "long.jsonl")
	if err := os.WriteFile(long, []byte(`{"request_id":"`+strings.Repeat("x", 17<<20)+`"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runArgs(t, "tail", "--outcomes", long); err == nil || !strings.Contains(err.Error(), long+": a line longer than") {
		t.Errorf("a long line: %v", err)
	}
	trace := filepath.Join(dir, "trace.jsonl")
	if err := os.WriteFile(trace, []byte(`{"timestamp":0,"input_length":700,"output_length":8,"hash_ids":[0,1]}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, stderr, err := runArgs(t, "tail", "--outcomes", trace); err != nil || !strings.Contains(stderr, "warning: 1 of the 1 outcome lines have neither") {
		t.Errorf("a trace as outcomes: %v, stderr %q", err, stderr)
	}
}

// A result records the program that ran, not "go run".
func TestCommandLine(t *testing.T) {
	want := filepath.Base(os.Args[0]) + " run --out 'a dir'"
	if got := commandLine("run", []string{"--out", "a dir"}); got != want {
		t.Errorf("commandLine = %q, want %q", got, want)
	}
}

// The specification's names work: run --base-url with --out naming the
// result file itself, then plot FILE --out DIR (flags after the files).
func TestSpecificationNames(t *testing.T) {
	url, dir := startSim(t), t.TempDir()
	file := filepath.Join(dir, "try", "w1.json")
	if _, _, err := runArgs(t, "run", "--base-url", url, "--model", "inferrail/sim-8b", "--workload", "w1",
		"--rate", "50", "--requests", "4", "--warmup", "0", "--output-tokens", "2", "--out", file); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(file); err != nil {
		t.Fatalf("--out %s: %v", file, err)
	}
	report := filepath.Join(dir, "report")
	stdout, _, err := runArgs(t, "plot", file, "--out", report)
	if err != nil || stdout != "report written to "+filepath.Join(report, "report.md")+"\n" {
		t.Fatalf("plot: %q, %v", stdout, err)
	}
	if md, err := os.ReadFile(filepath.Join(report, "report.md")); err != nil || !strings.Contains(string(md), "w1") {
		t.Errorf("report.md: %v\n%s", err, md)
	}
	for _, args := range [][]string{{"plot"}, {"plot", file}, {"plot", "--out", report}} {
		if _, _, err := runArgs(t, args...); err == nil || !strings.Contains(err.Error(), "plot: name one or more result files, and --out") {
			t.Errorf("%v: %v", args, err)
		}
	}
	if _, _, err := runArgs(t, "plot", filepath.Join(dir, "none.json"), "--out", report); err == nil {
		t.Error("plot of a file that is not there: no error")
	}
}

// A sweep reads its --trace once for every run that replays it, and serves
// the model and block size the trace's lines state, as run does: each run
// read the trace again, so a pipe (--trace <(zcat …)) had nothing left
// after the first ("no requests"), and the trace's model and block size
// were passed over. The simulator here is a script that writes down its
// flags and fails, so no run goes further.
func TestSweepReadsItsTraceOnce(t *testing.T) {
	dir := t.TempDir()
	argsFile := filepath.Join(dir, "sim-args")
	fakeSim := filepath.Join(dir, "sim.sh")
	if err := os.WriteFile(fakeSim, []byte("#!/bin/sh\necho \"$@\" >> '"+argsFile+"'\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	sweepFile := filepath.Join(dir, "sweep.toml")
	toml := "policies = [\"round_robin\"]\nreps = 2\nreplicas = 1\nwarmup = \"0\"\n\n[[points]]\nworkload = \"trace\"\nrates = [1]\n"
	if err := os.WriteFile(sweepFile, []byte(toml), 0o644); err != nil {
		t.Fatal(err)
	}
	// A pipe, as bash's <(…) gives: it can be read to its end once.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	line := `{"timestamp":%d,"input_length":100,"output_length":4,"hash_ids":[1],"model":"acme/m1","block_size":64}` + "\n"
	for i := range 3 {
		fmt.Fprintf(w, line, 10*i) // far less than a pipe holds
	}
	w.Close()
	trace := fmt.Sprintf("/dev/fd/%d", r.Fd())

	done := make(chan string, 1)
	go func() {
		stdout, _, _ := runArgs(t, "sweep", "--file", sweepFile, "--out", filepath.Join(dir, "results"), "--trace", trace,
			"--sim-binary", fakeSim, "--gateway-binary", filepath.Join(dir, "no-gateway"))
		done <- stdout
	}()
	var stdout string
	select {
	case stdout = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("sweep did not return within two minutes")
	}
	if failed := strings.Count(stdout, "failed: trace_x1_rep"); failed != 2 || strings.Contains(stdout, "no requests") {
		t.Errorf("want both runs to fail at the simulator's start, not at the trace; the sweep said:\n%s", stdout)
	}
	b, err := os.ReadFile(argsFile)
	if err != nil {
		t.Fatalf("no simulator started: %v\nsweep said:\n%s", err, stdout)
	}
	// Each run tries its simulator more than once.
	starts := strings.Split(strings.TrimSpace(string(b)), "\n")
	for _, args := range starts {
		if !strings.Contains(args, "--served-model-name acme/m1 ") || !strings.Contains(args, "--block-size=64") {
			t.Errorf("simulator flags %q, want the trace's model acme/m1 and block size 64", args)
		}
	}
}

// A sweep takes an earlier result for its own only when it replayed the
// same trace or ShareGPT file, byte for byte, not merely one at the same
// path: a file edited in place (or a second --trace <(…), /dev/fd/63 both
// times) was reported from the first file's results. A result written
// before the digest was recorded is run again: nothing says what it
// replayed.
func TestSweepResumesOnlyTheSameInput(t *testing.T) {
	traceA := `{"timestamp":0,"input_length":100,"output_length":4,"hash_ids":[1]}` + "\n"
	traceB := `{"timestamp":0,"input_length":200,"output_length":4,"hash_ids":[2]}` + "\n"
	shareGPTA := `[{"id":"a","conversations":[{"from":"human","value":"hello there"},{"from":"gpt","value":"hi"}]}]`
	shareGPTB := `[{"id":"b","conversations":[{"from":"human","value":"goodbye now"},{"from":"gpt","value":"bye"}]}]`
	sum := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	inputs := []struct {
		name, point, digestKey, a, b string
		traceFlag                    bool
	}{
		{"trace", "workload = \"trace\"\nrates = [1]\n", "TraceDigest", traceA, traceB, true},
		{"sharegpt", "workload = \"w2\"\nrates = [1]\nrequests = 2\nsharegpt = %q\n", "ShareGPTDigest", shareGPTA, shareGPTB, false},
	}
	for _, in := range inputs {
		tests := []struct {
			name     string
			recorded string // the digest the result file records; empty: none, as before the digest
			replay   string // the file at the path when the sweep runs
			done     bool
		}{
			{"same_file", sum(in.a), in.a, true},
			{"edited_in_place", sum(in.a), in.b, false},
			{"result_without_digest", "", in.a, false},
		}
		for _, tt := range tests {
			t.Run(in.name+"/"+tt.name, func(t *testing.T) {
				dir := t.TempDir()
				fakeSim := filepath.Join(dir, "sim.sh") // fails at once: no run goes further
				if err := os.WriteFile(fakeSim, []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
					t.Fatal(err)
				}
				input := filepath.Join(dir, "input")
				if err := os.WriteFile(input, []byte(in.a), 0o644); err != nil {
					t.Fatal(err)
				}
				point := in.point
				if !in.traceFlag {
					point = fmt.Sprintf(point, input)
				}
				sweepFile := filepath.Join(dir, "sweep.toml")
				toml := "policies = [\"round_robin\"]\nreplicas = 1\nwarmup = \"0\"\n\n[[points]]\n" + point
				if err := os.WriteFile(sweepFile, []byte(toml), 0o644); err != nil {
					t.Fatal(err)
				}
				f, err := bench.LoadSweep(sweepFile)
				if err != nil {
					t.Fatal(err)
				}
				runs, _ := f.Plan(bench.PlanOptions{TracePath: input})
				if len(runs) != 1 {
					t.Fatalf("%d runs planned, want 1", len(runs))
				}
				out := filepath.Join(dir, "results")
				path := filepath.Join(out, runs[0].FileName())
				if err := bench.WriteRunResult(path, &bench.RunResult{Spec: runs[0]}); err != nil {
					t.Fatal(err)
				}
				if tt.recorded != "" { // as a sweep of this file writes it
					var doc map[string]any
					b, _ := os.ReadFile(path)
					if err := json.Unmarshal(b, &doc); err != nil {
						t.Fatal(err)
					}
					doc["spec"].(map[string]any)["workload"].(map[string]any)[in.digestKey] = tt.recorded
					if b, err = json.Marshal(doc); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(path, b, 0o644); err != nil {
						t.Fatal(err)
					}
				}
				if err := os.WriteFile(input, []byte(tt.replay), 0o644); err != nil {
					t.Fatal(err)
				}
				args := []string{"sweep", "--file", sweepFile, "--out", out, "--sim-binary", fakeSim, "--gateway-binary", filepath.Join(dir, "no-gateway")}
				if in.traceFlag {
					args = append(args, "--trace", input)
				}
				stdout, _, _ := runArgs(t, args...)
				want := "1 planned, 0 already done"
				if tt.done {
					want = "1 planned, 1 already done"
				}
				if !strings.Contains(stdout, want) {
					t.Errorf("sweep said:\n%s\nwant %q", stdout, want)
				}
			})
		}
	}
}

// run reads --sharegpt once, so a pipe replays as a file does, and its
// result records the SHA-256 of what it replayed.
func TestRunShareGPTFromAPipe(t *testing.T) {
	url, out := startSim(t), filepath.Join(t.TempDir(), "r.json")
	content := `[{"id":"a","conversations":[{"from":"human","value":"hello there"},{"from":"gpt","value":"hi"}]}]`
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := w.WriteString(content); err != nil { // far less than a pipe holds
		t.Fatal(err)
	}
	w.Close()
	if _, err := urlRun(t, url, out, "--workload", "w2", "--sharegpt", fmt.Sprintf("/dev/fd/%d", r.Fd())); err != nil {
		t.Fatal(err)
	}
	res, err := bench.ReadRunResult(out)
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("%x", sha256.Sum256([]byte(content))); res.Spec.Workload.ShareGPTDigest != want {
		t.Errorf("recorded digest %q, want %q", res.Spec.Workload.ShareGPTDigest, want)
	}
}
