package stress

import (
	"context"
	"errors"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/measure"
	"github.com/inferrail/inferrail/internal/sim"
	"github.com/inferrail/inferrail/internal/stress/stresstest"
)

func TestRunStreamsCountsErrors(t *testing.T) {
	f, err := RunStreams(t.Context(), stresstest.DeadURL(t), StreamsLoad{Streams: 20, MaxTokens: 16, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if f.Errors != 20 || f.Completed != 0 || f.ErrorKinds[measure.KindTransport] != 20 || f.WallSeconds != 0 {
		t.Errorf("RunStreams(nothing listening) = %+v, want 20 transport errors", f)
	}
}

func TestRunSoakCountsErrors(t *testing.T) {
	l := SoakLoad{Requests: 30, Concurrency: 4, Warmup: 10, Timeout: 5 * time.Second}
	f, err := RunSoak(t.Context(), stresstest.DeadURL(t), l, 0)
	if err != nil {
		t.Fatal(err)
	}
	if f.Errors != 30 || f.Completed != 0 || f.Cancelled != 0 || f.Memory != nil || f.Sim != nil {
		t.Errorf("RunSoak(nothing listening) = %+v, want 30 errors and no memory or gauges", f)
	}
}

func TestRunStreamsInProcess(t *testing.T) {
	cfg := sim.DefaultConfig()
	cfg.ZeroLatency = true
	srv, err := sim.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	engineDone := make(chan error, 1)
	go func() { engineDone <- srv.Run(ctx) }()
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		ts.Close()
		cancel()
		<-engineDone
	})
	f, err := RunStreams(t.Context(), ts.URL, StreamsLoad{Streams: 50, MaxTokens: 7})
	if err != nil {
		t.Fatal(err)
	}
	if f.Completed != 50 || f.Errors != 0 {
		t.Errorf("completed %d, errors %d (%v), want 50 and 0", f.Completed, f.Errors, f.ErrorSamples)
	}
}

func TestReadStream(t *testing.T) {
	const (
		role   = `data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}` + "\n\n"
		hello  = `data: {"choices":[{"index":0,"delta":{"content":"hello "},"finish_reason":null}]}` + "\n\n"
		last   = `data: {"choices":[{"index":0,"delta":{"content":"world "},"finish_reason":"length"}]}` + "\n\n"
		usage2 = `data: {"choices":[],"usage":{"prompt_tokens":5,"total_tokens":7,"completion_tokens":2}}` + "\n\n"
		usage3 = `data: {"choices":[],"usage":{"prompt_tokens":5,"total_tokens":8,"completion_tokens":3}}` + "\n\n"
		done   = "data: [DONE]\n\n"
	)
	tests := []struct {
		name   string
		stream string
		check  StreamCheck
		want   string // error kind, "" for none
	}{
		{"good", role + hello + last + usage2 + done, StreamCheck{MaxTokens: 2, Exact: true, WantUsage: true}, ""},
		{"good_without_usage", role + hello + last + done, StreamCheck{MaxTokens: 2}, ""},
		{"no_done", role + hello + last + usage2, StreamCheck{MaxTokens: 2, WantUsage: true}, measure.KindNoDone},
		{"cut_mid_event", role + hello + `data: {"cho`, StreamCheck{MaxTokens: 2}, measure.KindSSE},
		{"after_done", role + hello + last + done + hello, StreamCheck{MaxTokens: 2}, measure.KindAfterDone},
		{"no_finish", role + hello + usage2 + done, StreamCheck{MaxTokens: 2, WantUsage: true}, measure.KindFinish},
		{"two_finishes", role + last + last + done, StreamCheck{MaxTokens: 2}, measure.KindFinish},
		{"missing_usage", role + hello + last + done, StreamCheck{MaxTokens: 2, WantUsage: true}, measure.KindUsage},
		{"unasked_usage", role + hello + last + usage2 + done, StreamCheck{MaxTokens: 2}, measure.KindUsage},
		{"usage_over_max", role + hello + last + usage3 + done, StreamCheck{MaxTokens: 2, WantUsage: true}, measure.KindUsage},
		{"usage_not_exact", role + hello + last + usage2 + done, StreamCheck{MaxTokens: 3, Exact: true, WantUsage: true}, measure.KindUsage},
		{"bad_json", "data: {nope\n\n" + done, StreamCheck{MaxTokens: 2}, measure.KindJSON},
		{"error_event", `data: {"error": {"message": "boom", "code": 500}}` + "\n\n" + done, StreamCheck{MaxTokens: 2}, measure.KindErrorEvent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ReadStream(strings.NewReader(tt.stream), tt.check)
			got := ""
			if err != nil {
				var le *measure.RequestError
				if !errors.As(err, &le) {
					t.Fatalf("readStream = %v, not a measure.RequestError", err)
				}
				got = le.Kind
			}
			if got != tt.want {
				t.Errorf("readStream error kind = %q (%v), want %q", got, err, tt.want)
			}
		})
	}
	t.Run("leave", func(t *testing.T) {
		n := 0
		err := ReadStream(strings.NewReader(role+hello+last+done), StreamCheck{MaxTokens: 2, OnContent: func() bool { n++; return false }})
		if !errors.Is(err, ErrLeft) || n != 1 {
			t.Errorf("readStream = %v after %d content chunks, want errLeft after 1", err, n)
		}
	})
}

func TestParseGauges(t *testing.T) {
	page := `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_waiting{engine="0",model_name="m"} 1.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:num_preemptions_total{engine="0",model_name="m"} 2.0
vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 10.0
vllm:request_success_total{engine="0",finished_reason="abort",model_name="m"} 1.0
vllm:request_success_created{engine="0",finished_reason="stop",model_name="m"} 1.7e+09
`
	got, err := parseGauges(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	want := &SimGauges{Running: 3, Waiting: 1, KVUsage: 0.25, Preemptions: 2, RequestSuccess: map[string]float64{"stop": 10, "abort": 1}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parseGauges = %+v, want %+v", got, want)
	}
}
