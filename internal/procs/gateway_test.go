package procs

import (
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
