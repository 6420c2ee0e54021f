package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/sim"
)

func TestRunNeedsURL(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), nil, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "--url") {
		t.Fatalf("run without --url = %v, want an error naming --url", err)
	}
}

func TestRunBadList(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), []string{"--url", "http://127.0.0.1:1", "--cached", "0,x"}, &stdout, &stderr)
	if err == nil || !strings.Contains(stderr.String(), "comma-separated") {
		t.Fatalf("run with --cached 0,x = %v (stderr %q), want a list error", err, stderr.String())
	}
}

// Negative counts and times are refused, naming the flag, before anything
// is sent: --timeout -1s became the default 2 minutes, and --warmup -3
// sent no warmup.
func TestRunRefusesNegative(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--timeout", "-1s"}, "--timeout: must not be negative, got -1s"},
		{[]string{"--warmup", "-3"}, "--warmup: must not be negative, got -3"},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			// Nothing listens there: a run that went ahead would fail to reach it.
			err := run(t.Context(), append([]string{"--url", "http://127.0.0.1:1"}, tt.args...), &stdout, &stderr)
			if err == nil || err.Error() != tt.want {
				t.Errorf("run = %v, want %q", err, tt.want)
			}
		})
	}
}

// TestRunWritesFragment calibrates a simulator through the command line and
// feeds the fragment it wrote to the gateway's config parser.
func TestRunWritesFragment(t *testing.T) {
	l, err := sim.StartLocal(sim.DefaultConfig(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	out := filepath.Join(t.TempDir(), "cost_model.yaml")
	var stdout, stderr bytes.Buffer
	args := []string{"--url", l.URL(), "--seed", "11", "--uncached", "32,256,1024", "--cached", "0,1024",
		"--reps", "3", "--warmup", "0", "--out", out}
	if err := run(t.Context(), args, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stdout.String(), "seed 11") || !strings.Contains(stdout.String(), "prefill_fixed_secs:") {
		t.Errorf("report lacks the seed or the fragment:\n%s", stdout.String())
	}
	frag, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	base := "models:\n  - name: m\nreplicas:\n  - id: r\n    url: http://127.0.0.1:8000\n    models: [m]\n"
	cfg, err := config.Parse(append([]byte(base), frag...))
	if err != nil {
		t.Fatalf("config.Parse(fragment): %v\n%s", err, frag)
	}
	if a := cfg.Routing.CostModel.PrefillTokenSecs; a < 95e-6 || a > 105e-6 {
		t.Errorf("prefill_token_secs = %g, want about 100e-6", a)
	}
}

// TestHelpShowsNoClockAsDefault: the seed's default is the clock at run
// time, not a number -h happened to read.
func TestHelpShowsNoClockAsDefault(t *testing.T) {
	var stdout, stderr bytes.Buffer
	_ = run(t.Context(), []string{"-h"}, &stdout, &stderr)
	help := stderr.String()
	i := strings.Index(help, "-seed")
	if i < 0 {
		t.Fatalf("no -seed in the help:\n%s", help)
	}
	line, _, _ := strings.Cut(help[i:], "\n  -")
	if strings.Contains(line, "(default 1") {
		t.Errorf("the seed's help shows a clock reading as its default: %q", line)
	}
}
