package stress

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestSnake(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"Streams", "streams"},
		{"MaxTokens", "max_tokens"},
		{"MaxNumSeqs", "max_num_seqs"},
		{"NumGPUBlocks", "num_gpu_blocks"},
		{"W1Output", "w1_output"},
		{"TargetMs", "target_ms"},
		{"URL", "url"},
		{"HTTPServer", "http_server"},
	} {
		if got := snake(tc.in); got != tc.want {
			t.Errorf("snake(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

type paramsInner struct{ Depth, Width int }

type paramsLeg struct {
	Name  string
	Every time.Duration
}

type paramsLoad struct {
	paramsInner // unexported: left out, as its fields cannot be read
	StreamsLoad
	Rate     int
	Wait     time.Duration
	Tagged   int `json:"renamed,omitempty"`
	Ignored  int `json:"-"`
	Families []string
	Legs     []paramsLeg
	One      paramsLeg
	hidden   int
}

func TestParams(t *testing.T) {
	l := paramsLoad{paramsInner: paramsInner{1, 2}, StreamsLoad: StreamsLoad{Streams: 3, MaxTokens: 4, Timeout: time.Second},
		Rate: 5, Wait: 1500 * time.Millisecond, Tagged: 6, Ignored: 7, Families: []string{"a", "b"},
		Legs: []paramsLeg{{"x", time.Minute}}, One: paramsLeg{"y", 0}, hidden: 8}
	want := map[string]any{
		"streams": 3, "max_tokens": 4, "timeout": "1s", "rate": 5, "wait": "1.5s", "renamed": 6,
		"families": []string{"a", "b"},
		"legs":     []any{map[string]any{"name": "x", "every": "1m0s"}},
		"one":      map[string]any{"name": "y", "every": "0s"},
	}
	for _, in := range []any{l, &l} {
		if got := Params(in); !reflect.DeepEqual(got, want) {
			t.Errorf("Params(%T) =\n%v\nwant\n%v", in, got, want)
		}
	}
	var nilLoad *paramsLoad
	if got := Params(nilLoad); got != nil {
		t.Errorf("Params(nil) = %v", got)
	}
	if got := Params(3); got != nil {
		t.Errorf("Params(3) = %v", got)
	}
}

func TestDescriptions(t *testing.T) {
	d := ParseDescriptions(`{{/* comment */}}
{{define "one"}}
  {{.Streams}} streams
  of {{.MaxTokens}} tokens, {{mib .Bytes}}, {{pct .Share}}
  of {{join .Names}}, {{twice .Streams}}.
{{end}}
{{define "broken"}}{{.Missing}}{{end}}`, map[string]any{"twice": func(n int) int { return 2 * n }})
	load := struct {
		StreamsLoad
		Bytes int
		Share float64
		Names []string
	}{StreamsLoad{Streams: 2, MaxTokens: 7}, 3 << 20, 0.25, []string{"a", "b"}}
	got, err := d.Render("one", load)
	if want := "2 streams of 7 tokens, 3.0 MiB, 25% of a, b, 4."; err != nil || got != want {
		t.Errorf("Render = %q, %v; want %q", got, err, want)
	}
	if _, err := d.Render("broken", load); err == nil {
		t.Error("a missing field rendered")
	}
	if got := d.Of("broken", load); !strings.HasPrefix(got, "no description: ") {
		t.Errorf("Of(broken) = %q", got)
	}
	if got := d.Of("absent", load); got != "no description: no description of absent" {
		t.Errorf("Of(absent) = %q", got)
	}
	if got, err := d.Render("one", struct{ Streams string }{}); err == nil {
		t.Errorf("rendered %q on a load without the fields", got)
	}
	if got := d.Names(); !reflect.DeepEqual(slices.Sorted(slices.Values(got)), []string{"broken", "one"}) {
		t.Errorf("Names = %v", got)
	}
}
