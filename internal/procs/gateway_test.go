package procs

import (
	"strings"
	"testing"
	"time"
)

func TestGWLog(t *testing.T) {
	l := newGWLog()
	lines := `{"time":"2026-11-29T13:57:21.813Z","level":"INFO","msg":"inferrail-gateway listening","client":"127.0.0.1:1"}
{"time":"2026-11-29T13:57:21.814Z","level":"DEBUG","msg":"attempt failed","request_id":"gwhang-7","replica":"sim-2","attempt":1,"error":"replica failed its health checks while the request waited"}
{"time":"2026-11-29T13:57:21.815Z","level":"WARN","msg":"replica fails probes","replica":"sim-2"}
{"time":"2026-11-29T13:57:21.816Z","level":"DEBUG","msg":"http: panic serving 127.0.0.1:5: boom"}
{"time":"2026-11-29T13:57:21.817Z","level":"DEBUG","msg":"http2: server connection error from [::1]:46246: connection error: PROTOCOL_ERROR"}
not json at all
`
	// Written in odd pieces, as a pipe delivers them.
	for i := 0; i < len(lines); i += 7 {
		if _, err := l.Write([]byte(lines[i:min(i+7, len(lines))])); err != nil {
			t.Fatal(err)
		}
	}
	s := l.summary()
	if s.Messages["WARN replica fails probes"] != 1 || s.Messages["DEBUG attempt failed"] != 1 || s.Unparsed != 1 || len(s.Panics) != 1 ||
		s.Messages["DEBUG http2: server connection error from <addr>: connection error: PROTOCOL_ERROR"] != 1 {
		t.Errorf("summary = %+v", s)
	}
	at := time.Date(2026, 11, 29, 13, 57, 21, 814e6, time.UTC)
	ev := l.eventsCopy()
	if len(ev) != 2 || !ev[0].At.Equal(at) || ev[0].Msg != MsgAttemptFailed || ev[0].RequestID != "gwhang-7" || ev[0].Replica != "sim-2" ||
		ev[0].Error != "replica failed its health checks while the request waited" || ev[1].Msg != MsgProbesFail {
		t.Errorf("events = %+v", ev)
	}
	if e, ok := FirstEvent(ev, MsgProbesFail, "sim-2", at); !ok || !e.At.Equal(at.Add(time.Millisecond)) {
		t.Errorf("FirstEvent = %+v, %v", e, ok)
	}
	if _, ok := FirstEvent(ev, MsgProbesFail, "sim-2", at.Add(time.Second)); ok {
		t.Error("FirstEvent found an event before from")
	}
	if s.AttemptErrors["sim-2: replica failed its health checks while the request waited"] != 1 {
		t.Errorf("attempt errors = %v", s.AttemptErrors)
	}
}

func TestParsePage(t *testing.T) {
	page := `# HELP inferrail_replica_ejected 1 while passive ejection keeps the replica out of rotation.
# TYPE inferrail_replica_ejected gauge
inferrail_replica_ejected{replica="sim-1"} 0
inferrail_replica_ejected{replica="sim-2"} 1
inferrail_replica_ejected{replica="sim-20"} 1
inferrail_routing_decisions_total{model="m",policy="least_request",replica="sim-2"} 12
inferrail_routing_decisions_total{model="n",policy="least_request",replica="sim-2"} 3
inferrail_upstream_retries_total{model="m"} 4 1700000000000
odd{label="a b } c"} 2.5e+00
go_goroutines 17
`
	p, err := ParsePage(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		labels []string
		want   float64
	}{
		{"inferrail_replica_ejected", []string{Label("replica", "sim-2")}, 1},
		{"inferrail_replica_ejected", nil, 2},
		{"inferrail_routing_decisions_total", []string{Label("replica", "sim-2")}, 15},
		{"inferrail_routing_decisions_total", []string{Label("replica", "sim-2"), Label("model", "n")}, 3},
		{"inferrail_upstream_retries_total", nil, 4},
		{"odd", nil, 2.5},
		{"go_goroutines", nil, 17},
		{"missing", nil, 0},
	}
	for _, tt := range tests {
		if got := p.Sum(tt.name, tt.labels...); got != tt.want {
			t.Errorf("sum(%s, %v) = %v, want %v", tt.name, tt.labels, got, tt.want)
		}
	}
	if _, err := ParsePage(strings.NewReader("x{a=\"b\"} notanumber\n")); err == nil {
		t.Error("ParsePage accepted a value that is not a number")
	}
}
