package config

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestObservabilityRules checks the observability section's rules one by
// one on a config that is otherwise valid.
func TestObservabilityRules(t *testing.T) {
	tests := []struct {
		name string
		edit func(o *Observability)
		want []string // messages, in order; nil: valid
	}{
		{"defaults", func(*Observability) {}, nil},
		{"http_bare_address", func(o *Observability) { o.OTLPEndpoint = "http://collector:4318" }, nil},
		{"https_with_path", func(o *Observability) { o.OTLPEndpoint = "https://collector/otlp/v1/traces" }, nil},
		{"grpc_address", func(o *Observability) { o.OTLPEndpoint, o.OTLPProtocol = "http://collector:4317/", OTLPGRPC }, nil},
		{"grpc_path", func(o *Observability) { o.OTLPEndpoint, o.OTLPProtocol = "http://collector:4317/x", OTLPGRPC },
			[]string{"observability.otlp_endpoint: must have no path with otlp_protocol grpc: a gRPC collector is named by its address"}},
		{"not_a_url", func(o *Observability) { o.OTLPEndpoint = "grpc://collector:4317" },
			[]string{"observability.otlp_endpoint: must be an absolute http or https URL"}},
		{"empty_protocol", func(o *Observability) { o.OTLPProtocol = "" },
			[]string{`observability.otlp_protocol: must be http/protobuf or grpc, not ""`}},
		{"ratio_nan", func(o *Observability) { o.TraceSampleRatio = math.NaN() },
			[]string{"observability.trace_sample_ratio: must be between 0 and 1"}},
		{"log_without_path", func(o *Observability) { o.DecisionLog.SampleRate = 0.5 },
			[]string{"observability.decision_log.path: required when decision_log.sample_rate is above 0"}},
		{"log_blank_path", func(o *Observability) { o.DecisionLog.SampleRate, o.DecisionLog.Path = 1, "  " },
			[]string{"observability.decision_log.path: required when decision_log.sample_rate is above 0"}},
		{"path_while_off", func(o *Observability) { o.DecisionLog.Path = "decisions.jsonl" }, nil},
		{"log_over_one", func(o *Observability) { o.DecisionLog.SampleRate, o.DecisionLog.Path = 1.01, "d.jsonl" },
			[]string{"observability.decision_log.sample_rate: must be between 0 and 1"}},
		{"capture_on", func(o *Observability) { o.Capture.Path = "capture.jsonl" }, nil},
		{"capture_blank_path", func(o *Observability) { o.Capture.Path = " " },
			[]string{"observability.capture.path: must not be blank"}},
		{"capture_directory", func(o *Observability) { o.Capture.Path = "/var/log/" },
			[]string{"observability.capture.path: must name a file, not a directory"}},
		{"capture_is_decision_log", func(o *Observability) {
			o.Capture.Path, o.DecisionLog.Path, o.DecisionLog.SampleRate = "x.jsonl", "x.jsonl", 1
		}, []string{"observability.capture.path: must differ from decision_log.path"}},
		{"shadow_log_on", func(o *Observability) { o.ShadowLog = "shadow.jsonl" }, nil},
		{"shadow_log_blank", func(o *Observability) { o.ShadowLog = "   " },
			[]string{"observability.shadow_log: must not be blank"}},
		{"shadow_log_directory", func(o *Observability) { o.ShadowLog = "/var/log/" },
			[]string{"observability.shadow_log: must name a file, not a directory"}},
		{"shadow_log_is_decision_log", func(o *Observability) {
			o.ShadowLog, o.DecisionLog.Path, o.DecisionLog.SampleRate = "x.jsonl", "x.jsonl", 1
		}, []string{"observability.shadow_log: must differ from decision_log.path"}},
		{"shadow_log_is_capture", func(o *Observability) { o.ShadowLog, o.Capture.Path = "x.jsonl", "x.jsonl" },
			[]string{"observability.shadow_log: must differ from capture.path"}},
		// The same file written another way is the same file.
		{"shadow_log_is_decision_log_dotted", func(o *Observability) {
			o.ShadowLog, o.DecisionLog.Path, o.DecisionLog.SampleRate = "/tmp/./logs/../x.jsonl", "/tmp/x.jsonl", 1
		}, []string{"observability.shadow_log: must differ from decision_log.path"}},
		{"capture_is_decision_log_relative", func(o *Observability) {
			o.Capture.Path, o.DecisionLog.Path, o.DecisionLog.SampleRate = "x.jsonl", cwdPath("x.jsonl"), 1
		}, []string{"observability.capture.path: must differ from decision_log.path"}},
		{"shadow_log_is_capture_dotted", func(o *Observability) { o.ShadowLog, o.Capture.Path = "./x.jsonl", "x.jsonl" },
			[]string{"observability.shadow_log: must differ from capture.path"}},
		{"shadow_log_beside_capture", func(o *Observability) { o.ShadowLog, o.Capture.Path = "x.jsonl", "y/x.jsonl" }, nil},
		{"capture_bounds", func(o *Observability) {
			o.Capture.SampleRate, o.Capture.MaxSizeMB, o.Capture.MaxFiles, o.Capture.MaxBlockIDs = -0.5, 0, -1, 999
		}, []string{"observability.capture.sample_rate: must be between 0 and 1", "observability.capture.max_size_mb: must be >= 1",
			"observability.capture.max_files: must be >= 0", "observability.capture.max_block_ids: must be >= 1000"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			c.Models = []Model{{Name: "m", BlockSize: 16}}
			c.Replicas = []Replica{{ID: "r", URL: "http://127.0.0.1:8000", Models: []string{"m"}, MaxConcurrency: 1, MaxPending: 1}}
			tt.edit(&c.Observability)
			var got []string
			for _, e := range c.validate() {
				got = append(got, e.Error())
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("validate() = %q, want %q", got, tt.want)
			}
		})
	}
}

// cwdPath is name in the working directory, as an absolute path.
func cwdPath(name string) string {
	wd, err := os.Getwd()
	if err != nil {
		panic(err)
	}
	return filepath.Join(wd, name)
}

// TestObservabilityPathsThroughALink: a log path reached through a
// symbolic link names the file the link points to.
func TestObservabilityPathsThroughALink(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "decisions.jsonl")
	if err := os.WriteFile(real, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "shadow.jsonl")
	if err := os.Symlink(real, link); err != nil {
		t.Skip("no symbolic links here:", err)
	}
	c := Default()
	c.Models = []Model{{Name: "m", BlockSize: 16}}
	c.Replicas = []Replica{{ID: "r", URL: "http://127.0.0.1:8000", Models: []string{"m"}, MaxConcurrency: 1, MaxPending: 1}}
	c.Observability.DecisionLog.Path, c.Observability.DecisionLog.SampleRate = real, 1
	c.Observability.ShadowLog = link
	var got []string
	for _, e := range c.validate() {
		got = append(got, e.Error())
	}
	if want := []string{"observability.shadow_log: must differ from decision_log.path"}; !slices.Equal(got, want) {
		t.Errorf("validate() = %q, want %q", got, want)
	}
}
