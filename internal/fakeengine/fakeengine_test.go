package fakeengine

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/load"
	"github.com/inferrail/inferrail/internal/stress"
)

func TestParsePages(t *testing.T) {
	tests := []struct {
		spec    string
		want    []string
		wantErr string
	}{
		{"stamped", []string{PageStamped}, ""},
		{"stampedx3,huge", []string{PageStamped, PageStamped, PageStamped, PageHuge}, ""},
		{" endlessx2 , stamped ", []string{PageEndless, PageEndless, PageStamped}, ""},
		{"hugex0", nil, "count"},
		{"stampedxmany", nil, "count"},
		{"slow", nil, `kind "slow"`},
		{"", nil, `kind ""`},
	}
	for _, tt := range tests {
		got, err := ParsePages(tt.spec)
		switch {
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("ParsePages(%q) error %v, want one with %q", tt.spec, err, tt.wantErr)
		case tt.wantErr == "" && (err != nil || !slices.Equal(got, tt.want)):
			t.Errorf("ParsePages(%q) = %v, %v, want %v", tt.spec, got, err, tt.want)
		}
	}
}

// TestStampedPage: the gateway's page reader takes the stamped page as a
// vLLM engine's, its running count the millisecond it was rendered
// (modulo 2^31, which StampTime undoes).
func TestStampedPage(t *testing.T) {
	e, err := New("m", PageStamped, 0)
	if err != nil {
		t.Fatal(err)
	}
	at := time.UnixMilli(1_764_600_000_123)
	rep, err := load.Parse(bytes.NewReader(e.AppendPage(nil, at)))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Engine != load.VLLM || rep.KVUsage != 0 || rep.CapacityBlocks != 4096 || rep.PrefixQueries != 1 {
		t.Errorf("report %+v", rep)
	}
	// Read back as the time it was rendered, at once or later.
	for _, later := range []time.Duration{0, time.Millisecond, time.Hour, 20 * 24 * time.Hour} {
		if got := StampTime(int64(rep.Running), at.Add(later)); !got.Equal(at.Truncate(time.Millisecond)) {
			t.Errorf("stamp %v read %v later: %v, want %v", rep.Running, later, got, at)
		}
	}
}

// TestHostilePages: a huge page is valid and exactly its size; an endless
// one goes past any limit.
func TestHostilePages(t *testing.T) {
	for _, tt := range []struct {
		page  string
		limit int64
	}{{PageHuge, 1 << 20}, {PageEndless, 3 << 20}} {
		e, err := New("m", tt.page, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(e)
		resp, err := http.Get(srv.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(io.LimitReader(resp.Body, tt.limit))
		resp.Body.Close()
		srv.Close()
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(data)) != tt.limit {
			t.Errorf("%s: read %d bytes, want %d", tt.page, len(data), tt.limit)
		}
		if _, err := load.Parse(bytes.NewReader(data[:bytes.LastIndexByte(data, '\n')+1])); err == nil {
			t.Errorf("%s: a page without the load families parsed", tt.page)
		}
	}
}

// TestChat: chats are answered as the stress checks want them.
func TestChat(t *testing.T) {
	e, _ := New("m", PageStamped, 0)
	srv := httptest.NewServer(e)
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","messages":[],"max_tokens":3}`))
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err := stress.CheckFull(data, 3); err != nil {
		t.Errorf("chat %s: %v", data, err)
	}
	resp, err = http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"max_tokens":`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a broken body: status %d, want 400", resp.StatusCode)
	}
}
