package harness_test

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/harness"
	"github.com/inferrail/inferrail/internal/procs"
	"github.com/inferrail/inferrail/internal/procs/procstest"
)

// TestMain lets the test binary act as the children TestFleet starts.
func TestMain(m *testing.M) { procstest.Main(m) }

// The loop dispatches every request at its time, each in a goroutine of
// its own: a send that blocks holds back none of the later ones.
func TestLoopDoesNotWaitOnSends(t *testing.T) {
	const n = 5
	release := make(chan struct{})
	var mu sync.Mutex
	var order []int
	var scheduled []int
	start := time.Now().Add(5 * time.Millisecond)
	loop := harness.Loop{Start: start, N: n, At: func(i int) time.Duration { return time.Duration(i) * 5 * time.Millisecond },
		OnSchedule: func(i int) { scheduled = append(scheduled, i) }}
	done := make(chan int)
	go func() {
		done <- loop.Run(t.Context(), func(i int, dispatched time.Duration) {
			if dispatched < time.Duration(i)*5*time.Millisecond {
				t.Errorf("request %d dispatched at %v, before its time", i, dispatched)
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			if i == 0 {
				<-release // the first send hangs until every other has been sent
			}
		})
	}()
	deadline := time.After(10 * time.Second)
	for {
		mu.Lock()
		got := len(order)
		mu.Unlock()
		if got == n {
			break
		}
		select {
		case <-deadline:
			t.Fatalf("only %d of %d sends started while the first one blocked", got, n)
		case <-time.After(time.Millisecond):
		}
	}
	close(release)
	if sent := <-done; sent != n {
		t.Errorf("Run = %d, want %d", sent, n)
	}
	if !reflect.DeepEqual(scheduled, []int{0, 1, 2, 3, 4}) {
		t.Errorf("OnSchedule saw %v", scheduled)
	}
}

// A loop whose context ends stops dispatching and says how far it got.
func TestLoopStopsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	loop := harness.Loop{Start: time.Now(), N: 3, At: func(i int) time.Duration { return time.Duration(i) * time.Hour }}
	sent := loop.Run(ctx, func(i int, _ time.Duration) { cancel() })
	if sent != 1 {
		t.Errorf("Run = %d, want 1 (the others were due after the context ended)", sent)
	}
}

func TestResultsRoundTrip(t *testing.T) {
	type result struct {
		Name  string `json:"name"`
		Value int    `json:"value"`
	}
	dir := filepath.Join(t.TempDir(), "results")
	for _, r := range []result{{"b", 2}, {"a", 1}} {
		if err := harness.WriteJSON(filepath.Join(dir, r.Name+".json"), r); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "a.json"))
	if err != nil || string(b) != "{\n  \"name\": \"a\",\n  \"value\": 1\n}\n" {
		t.Errorf("a.json = %q, %v", b, err)
	}
	if tmp, _ := filepath.Glob(filepath.Join(dir, "*.tmp")); len(tmp) != 0 {
		t.Errorf("temporary files left: %v", tmp)
	}
	got, skipped, err := harness.ReadDir[result](dir)
	if err != nil || len(skipped) != 0 {
		t.Fatal(err, skipped)
	}
	if len(got) != 2 || got[0] != (result{"a", 1}) || got[1] != (result{"b", 2}) {
		t.Errorf("ReadDir = %+v, want a then b", got)
	}
	if err := os.WriteFile(filepath.Join(dir, "c.json"), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := harness.ReadDir[result](dir); err == nil || !strings.Contains(err.Error(), "c.json") {
		t.Errorf("ReadDir of a broken file = %v, want an error naming it", err)
	}
}

// withDeadline runs read, failing the test if it has not returned in 10 s:
// the reads it guards once blocked forever on a FIFO.
func withDeadline[T any](t *testing.T, read func() T) T {
	t.Helper()
	done := make(chan T, 1)
	go func() { done <- read() }()
	select {
	case v := <-done:
		return v
	case <-time.After(10 * time.Second):
		t.Fatal("the read did not return within 10 s")
		var zero T
		return zero
	}
}

// ReadDir passes over what is not a regular file once symbolic links are
// followed, naming each, and still reads the results beside it; ReadJSON
// refuses such a path, and a file over MaxJSONBytes, with an error naming
// it. A FIFO once blocked the report forever and a link to /dev/zero grew
// it to gigabytes.
func TestReadDirSkipsWhatIsNotAFile(t *testing.T) {
	type result struct {
		Value int `json:"value"`
	}
	tests := []struct {
		name string
		make func(path string) error
		want string // in the skip's text
	}{
		{"fifo", func(p string) error { return syscall.Mkfifo(p, 0o644) }, "a named pipe"},
		{"link_to_dev_zero", func(p string) error { return os.Symlink("/dev/zero", p) }, "a device"},
		{"link_to_nothing", func(p string) error { return os.Symlink(p+".gone", p) }, "a symbolic link to nothing"},
		{"directory", func(p string) error { return os.Mkdir(p, 0o755) }, "a directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := harness.WriteJSON(filepath.Join(dir, "a.json"), result{1}); err != nil {
				t.Fatal(err)
			}
			odd := filepath.Join(dir, "b.json")
			if err := tt.make(odd); err != nil {
				t.Fatal(err)
			}
			type read struct {
				got     []result
				skipped []string
				err     error
			}
			r := withDeadline(t, func() read {
				got, skipped, err := harness.ReadDir[result](dir)
				return read{got, skipped, err}
			})
			if r.err != nil || len(r.got) != 1 || r.got[0].Value != 1 {
				t.Errorf("ReadDir = %+v, %v; want a.json's result alone", r.got, r.err)
			}
			if len(r.skipped) != 1 || !strings.Contains(r.skipped[0], odd) || !strings.Contains(r.skipped[0], tt.want) {
				t.Errorf("skipped %q, want %s named as %s", r.skipped, odd, tt.want)
			}
			if tt.name == "link_to_nothing" {
				return
			}
			err := withDeadline(t, func() error { _, err := harness.ReadJSON[result](odd); return err })
			if err == nil || !strings.Contains(err.Error(), odd+": not a regular file") {
				t.Errorf("ReadJSON(%s) = %v, want it refused as not a regular file", odd, err)
			}
		})
	}
	t.Run("too_large", func(t *testing.T) {
		dir := t.TempDir()
		big := filepath.Join(dir, "big.json")
		if err := os.WriteFile(big, []byte(`{"value":1}`), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(big, harness.MaxJSONBytes+1); err != nil { // sparse: no disk taken
			t.Fatal(err)
		}
		_, _, err := harness.ReadDir[result](dir)
		if err == nil || !strings.Contains(err.Error(), big+": ") || !strings.Contains(err.Error(), "64 MiB") {
			t.Errorf("ReadDir with a file over 64 MiB = %v, want an error naming it and the limit", err)
		}
	})
}

// WriteJSON refuses a path that is not a regular file and leaves it as it
// was: its rename put a regular file in place of a FIFO, and whoever read
// the FIFO learnt nothing.
func TestWriteJSONRefusesWhatIsNotAFile(t *testing.T) {
	tests := []struct {
		name string
		make func(path string) error
		want string
	}{
		{"fifo", func(p string) error { return syscall.Mkfifo(p, 0o644) }, "not a regular file (a named pipe)"},
		{"link_to_dev_null", func(p string) error { return os.Symlink("/dev/null", p) }, "not a regular file (a device)"},
		{"directory", func(p string) error { return os.Mkdir(p, 0o755) }, "not a regular file (a directory)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "r.json")
			if err := tt.make(path); err != nil {
				t.Fatal(err)
			}
			before, err := os.Lstat(path)
			if err != nil {
				t.Fatal(err)
			}
			err = harness.WriteJSON(path, map[string]int{"value": 1})
			if err == nil || !strings.Contains(err.Error(), path+": "+tt.want) {
				t.Errorf("WriteJSON(%s) = %v, want %q", path, err, tt.want)
			}
			if after, err := os.Lstat(path); err != nil || after.Mode() != before.Mode() {
				t.Errorf("%s was replaced: %v, %v", path, after.Mode(), err)
			}
		})
	}
}

// TestFleet starts two simulators behind a gateway with a generated config,
// waits for both to be healthy and stops them cleanly.
func TestFleet(t *testing.T) {
	ctx := t.Context()
	var f harness.Fleet
	defer f.Stop()
	if err := f.StartSims(ctx, 2, procs.SimOptions{Binary: os.Args[0], Env: procstest.SimEnv(), Args: []string{"--zero-latency"}}); err != nil {
		t.Fatal(err)
	}
	reps := f.Replicas()
	if len(reps) != 2 || reps[0].ID != "sim-1" || reps[1].ID != "sim-2" || reps[1].URL != f.Sims[1].URL {
		t.Errorf("replicas %+v", reps)
	}
	cfg := harness.GatewayConfig(reps, harness.GatewayOptions{Model: procs.SimModel, Aliases: []string{"sim"}, Caps: 16,
		RequestTimeout: 30 * time.Second, LogLevel: "debug"})
	if cfg.Routing.Seed != 1 || len(cfg.Replicas) != 2 || cfg.Replicas[0].MaxPending != 16 || cfg.Models[0].Aliases[0] != "sim" {
		t.Errorf("config: %+v", cfg)
	}
	if err := f.StartGateway(ctx, procs.GatewayOptions{Binary: os.Args[0], Env: procstest.GatewayEnv(), Config: cfg}); err != nil {
		t.Fatal(err)
	}
	if f.URL != f.Gateway.URL {
		t.Errorf("URL %q, want the gateway's %q", f.URL, f.Gateway.URL)
	}
	if err := f.WaitHealthy(ctx, 15*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := f.Stop(); err != nil {
		t.Errorf("Stop: %v", err)
	}
	if len(f.Sims) != 0 {
		t.Errorf("%d simulators left after Stop", len(f.Sims))
	}
	if err := f.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

// TestFleetExactIndex starts simulators publishing KV events behind two
// gateways in index mode exact, with the same config, and waits until
// both follow every engine's stream.
func TestFleetExactIndex(t *testing.T) {
	ctx := t.Context()
	var f harness.Fleet
	defer f.Stop()
	if err := f.StartSims(ctx, 2, procs.SimOptions{Binary: os.Args[0], Env: procstest.SimEnv(), KVEvents: true,
		Args: []string{"--zero-latency"}}); err != nil {
		t.Fatal(err)
	}
	reps := f.Replicas()
	for i, r := range reps {
		if !strings.HasPrefix(r.KVEndpoint, "tcp://127.0.0.1:") || !strings.HasPrefix(r.KVReplayEndpoint, "tcp://127.0.0.1:") ||
			r.KVEndpoint == r.KVReplayEndpoint || r.KVEndpoint != f.Sims[i].KVEndpoint {
			t.Errorf("replica %d: kv endpoints %q, %q", i, r.KVEndpoint, r.KVReplayEndpoint)
		}
	}
	cfg := harness.GatewayConfig(reps, harness.GatewayOptions{Model: procs.SimModel, Caps: 16, Tokenizer: "builtin:sim",
		RequestTimeout: 30 * time.Second, LogLevel: "warn", IndexMode: "exact"})
	if err := f.StartGateways(ctx, 2, procs.GatewayOptions{Binary: os.Args[0], Env: procstest.GatewayEnv(), Config: cfg}); err != nil {
		t.Fatal(err)
	}
	if len(f.Gateways) != 2 || f.Gateway != f.Gateways[0] || len(f.URLs) != 2 || f.URL != f.URLs[0] ||
		f.URLs[1] != f.Gateways[1].URL || f.URLs[0] == f.URLs[1] {
		t.Errorf("gateways %v, URL %s, URLs %v", f.Gateways, f.URL, f.URLs)
	}
	if !strings.Contains(f.Gateway.ConfigYAML, "endpoint: "+reps[1].KVEndpoint) {
		t.Errorf("config written without sim-2's endpoint:\n%s", f.Gateway.ConfigYAML)
	}
	if err := f.WaitHealthy(ctx, 15*time.Second); err != nil {
		t.Fatal(err)
	}
	client := procs.AdminClient()
	defer client.CloseIdleConnections()
	for i, gw := range f.Gateways {
		var st *procs.IndexStatus
		for deadline := time.Now().Add(10 * time.Second); ; {
			var err error
			st, err = gw.Index(ctx, client)
			if err != nil {
				t.Fatal(err)
			}
			if st.Following() || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if st.Mode != "exact" || !st.Following() || len(st.KVEvents) != 2 || st.KVEvents[0].Endpoint != reps[0].KVEndpoint {
			t.Errorf("gateway %d's /admin/index: %+v", i+1, st)
		}
	}
	if err := f.Stop(); err != nil || len(f.Gateways) != 0 || f.Gateway != nil || len(f.URLs) != 0 {
		t.Errorf("Stop: %v; gateways %v left", err, f.Gateways)
	}
}

// GatewayConfig writes the index mode and each replica's KV event sockets;
// without a mode it keeps the gateway's default.
func TestGatewayConfigIndex(t *testing.T) {
	reps := []harness.Replica{{ID: "sim-1", URL: "http://127.0.0.1:1", KVEndpoint: "tcp://127.0.0.1:2", KVReplayEndpoint: "tcp://127.0.0.1:3"}}
	cfg := harness.GatewayConfig(reps, harness.GatewayOptions{Model: procs.SimModel, Caps: 1, IndexMode: "exact",
		RequestTimeout: time.Second, LogLevel: "warn"})
	kv := cfg.Replicas[0].KVEvents
	if cfg.Index.Mode != "exact" || kv.Endpoint != "tcp://127.0.0.1:2" || kv.ReplayEndpoint != "tcp://127.0.0.1:3" {
		t.Errorf("index %+v, replica kv_events %+v", cfg.Index, kv)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
	if cfg := harness.GatewayConfig(reps[:0], harness.GatewayOptions{Model: procs.SimModel}); cfg.Index.Mode != "approximate" {
		t.Errorf("default index mode %q", cfg.Index.Mode)
	}
}
