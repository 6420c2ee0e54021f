package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/config"
)

// TestCheckStackConfig: make stack's gateway config passes --check; its
// only note is the admin port listening beyond loopback, which it must
// inside its container (compose publishes it on the host's loopback
// alone; deploy/compose's tests check that and the rest of the stack).
func TestCheckStackConfig(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"--check", "--config", "../../deploy/compose/gateway.yaml"}, &out, &errOut); err != nil {
		t.Fatalf("--check of the stack's config: %v", err)
	}
	got := out.String()
	if !strings.Contains(got, "valid (1 models, 3 replicas") || strings.Count(got, "note:") != strings.Count(got, "note: server.admin_listen 0.0.0.0:9090 is beyond loopback") {
		t.Errorf("--check printed %q", got)
	}
}

// checkConfig runs --check on a config of the given YAML and returns what
// it printed.
func checkConfig(t *testing.T, yaml string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"--check", "--config", path}, &out, &errOut); err != nil {
		t.Fatalf("--check of %q: %v", yaml, err)
	}
	return out.String()
}

func TestCheck(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"--check", "--config", "../../deploy/local.yaml"}, &out, &errOut); err != nil {
		t.Fatalf("--check of the quick-start config: %v", err)
	}
	if !strings.Contains(out.String(), "valid (1 models, 3 replicas") {
		t.Errorf("--check printed %q", out.String())
	}
	if strings.Contains(out.String(), "note:") {
		t.Errorf("--check of a config whose tokenizers all load printed notes: %q", out.String())
	}
	if !strings.Contains(out.String(), "predicts: model inferrail/sim-8b: tokenizer builtin:sim\n") {
		t.Errorf("--check does not say how the model's tokens are computed: %q", out.String())
	}
	// A Hugging Face tokenizer is named with the transformers class it
	// follows, which for a Llama 2 directory is not tokenizer.json as it is.
	if got := checkConfig(t, "models: [{name: m, tokenizer: ../../.cache/tokenizers/llama2}]\nreplicas: [{id: r, url: 'http://127.0.0.1:1', models: [m]}]\n"); !strings.Contains(got, "predicts: model m: tokenizer ../../.cache/tokenizers/llama2, as transformers' LlamaTokenizer builds it") {
		t.Errorf("--check of a Llama 2 tokenizer: %q", got)
	}
	if got := checkConfig(t, "models: [{name: m, tokenizer: /no/such/dir}, {name: n}]\nreplicas: [{id: r, url: 'http://127.0.0.1:1', models: [m, n]}]\n"); !strings.Contains(got, "note: model m: tokenizer \"/no/such/dir\"") || !strings.Contains(got, "note: model n: no tokenizer") {
		t.Errorf("--check does not say which models route without predictions: %q", got)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("models: []\nsurprise: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := run(context.Background(), []string{"--check", "--config", bad}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "surprise") {
		t.Errorf("--check of a bad config: %v, want the unknown key named", err)
	}
	if err := run(context.Background(), nil, &out, &errOut); err == nil {
		t.Error("no --config accepted")
	}
	// Flags stop at the first other argument: the --check after it would
	// be dropped and the gateway started, so such an argument is refused.
	if err := run(context.Background(), []string{"--config", "../../deploy/local.yaml", "oops", "--check"}, &out, &errOut); err == nil || !strings.Contains(err.Error(), `"oops"`) {
		t.Errorf("a stray argument before --check: %v", err)
	}
	// A config whose keys file is missing is not valid, and --check does not say it is.
	missing := filepath.Join(t.TempDir(), "keys.yaml")
	if err := os.WriteFile(bad, []byte("auth: {keys_file: "+missing+"}\nmodels: [{name: m}]\nreplicas: [{id: r, url: 'http://127.0.0.1:1', models: [m]}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := run(context.Background(), []string{"--check", "--config", bad}, &out, &errOut); err == nil || strings.Contains(out.String(), "valid") {
		t.Errorf("--check of a config whose keys file is missing: %v, printed %q", err, out.String())
	}
	// A decision log on a directory would move it aside: not valid.
	if err := os.WriteFile(bad, []byte("observability: {decision_log: {path: "+t.TempDir()+", sample_rate: 1}}\nmodels: [{name: m}]\nreplicas: [{id: r, url: 'http://127.0.0.1:1', models: [m]}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := run(context.Background(), []string{"--check", "--config", bad}, &out, &errOut); err == nil || !strings.Contains(err.Error(), "directory") {
		t.Errorf("--check of a decision log on a directory: %v, printed %q", err, out.String())
	}
	// The product specification's example config, but for its log paths:
	// --check probes those for writing, and /var/log/inferrail, where the
	// example puts them, need not exist here (without it the shadow log
	// could not be opened at start, and --check says so).
	spec, err := os.ReadFile("../../internal/config/testdata/spec-example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	moved := strings.ReplaceAll(string(spec), "/var/log/inferrail", t.TempDir())
	if moved == string(spec) {
		t.Fatal("the specification's example no longer logs to /var/log/inferrail: update this test")
	}
	if err := os.WriteFile(bad, []byte(moved), 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := run(context.Background(), []string{"--check", "--config", bad}, &out, &errOut); err != nil ||
		!strings.Contains(out.String(), "valid (1 models, 1 replicas, 1 dns groups)") {
		t.Errorf("--check of the specification's example: %v, %q", err, out.String())
	}
	// A shadow log in a directory that does not exist fails at start:
	// --check names it.
	if err := os.WriteFile(bad, []byte("observability: {shadow_log: "+filepath.Join(t.TempDir(), "none", "shadow.jsonl")+"}\nmodels: [{name: m}]\nreplicas: [{id: r, url: 'http://127.0.0.1:1', models: [m]}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := run(context.Background(), []string{"--check", "--config", bad}, &out, &errOut); err == nil || !strings.Contains(err.Error(), "observability.shadow_log") {
		t.Errorf("--check of a shadow log in a missing directory: %v, printed %q", err, out.String())
	}
}

// TestSIGHUPRereadsTheConfig: the gateway, a real process, rereads its
// config file on SIGHUP (with server.reload_interval off) and applies the
// edit as generation 2.
func TestSIGHUPRereadsTheConfig(t *testing.T) {
	ports, err := freePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	client, admin := ports[0], ports[1]
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	write := func(policy string) {
		cfg := fmt.Sprintf("server: {listen: '127.0.0.1:%d', admin_listen: '127.0.0.1:%d', reload_interval: 0s}\n"+
			"models: [{name: m}]\nreplicas: [{id: r, url: 'http://127.0.0.1:1', models: [m]}]\nrouting: {default_policy: %s}\n", client, admin, policy)
		if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("round_robin")
	c := gatewayChild(t, path)
	configURL := fmt.Sprintf("http://127.0.0.1:%d/admin/config", admin)
	if err := c.waitReady(func() (bool, string) { return getOK(configURL) }); err != nil {
		t.Fatal(err)
	}
	write("p2c")
	if err := c.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var ans struct {
			Generation uint64
			Config     struct {
				Routing struct {
					DefaultPolicy string `json:"default_policy"`
				}
			}
		}
		resp, err := probe.Get(configURL)
		if err == nil {
			_ = json.NewDecoder(resp.Body).Decode(&ans)
			resp.Body.Close()
		}
		if ans.Generation == 2 && ans.Config.Routing.DefaultPolicy == "p2c" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after SIGHUP: generation %d, policy %q; want 2, p2c\n%s", ans.Generation, ans.Config.Routing.DefaultPolicy, c.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSIGHUPWhileStarting: a SIGHUP that comes while the gateway starts
// (here while it loads Gemma 3's tokenizer, which takes seconds) does not
// end it, as the signal's default would: it serves, and stops cleanly.
func TestSIGHUPWhileStarting(t *testing.T) {
	if raceEnabled {
		t.Skip("loading the tokenizer takes 10 s under the race detector; run by make norace")
	}
	tok, err := filepath.Abs(filepath.Join("..", "..", ".cache", "tokenizers", "gemma3"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(tok, "tokenizer.json")); err != nil {
		t.Skipf("no tokenizer files in %s (run `make tokenizers`)", tok)
	}
	ports, err := freePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	cfg := fmt.Sprintf("server: {listen: '127.0.0.1:%d', admin_listen: '127.0.0.1:%d', reload_interval: 0s}\n"+
		"models: [{name: m, tokenizer: '%s'}]\nreplicas: [{id: r, url: 'http://127.0.0.1:1', models: [m]}]\n", ports[0], ports[1], tok)
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	c := gatewayChild(t, path)
	// Signalled before it sets SIGHUP aside, any process ends: wait until
	// it is well into loading the tokenizer (its memory past 100 MiB).
	configURL := fmt.Sprintf("http://127.0.0.1:%d/admin/config", ports[1])
	for rss(c.cmd.Process.Pid) < 100<<20 {
		select {
		case <-c.done:
			t.Fatalf("the gateway exited while starting: %v\n%s", c.waitErr, c.out.String())
		case <-time.After(2 * time.Millisecond):
		}
		if ok, _ := getOK(configURL); ok {
			t.Skip("the gateway was serving before the signal could be sent")
		}
	}
	if ok, _ := getOK(configURL); ok {
		t.Skip("the gateway was serving before the signal could be sent")
	}
	if err := c.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if err := c.waitReady(func() (bool, string) { return getOK(configURL) }); err != nil {
		t.Fatal(err)
	}
}

// TestSIGHUPWhileStopping: SIGHUPs that keep coming while the gateway
// stops on SIGTERM, to its last moment, do not end it with the signal's
// default (status 129): it exits cleanly, with status 0. The moment is
// short, so the gateway is started and stopped several times; on the
// old code, which gave SIGHUP back its default before exiting, about
// two stops in five ended on the signal.
func TestSIGHUPWhileStopping(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	for round := range 8 {
		ports, err := freePorts(2)
		if err != nil {
			t.Fatal(err)
		}
		cfg := fmt.Sprintf("server: {listen: '127.0.0.1:%d', admin_listen: '127.0.0.1:%d', reload_interval: 0s}\n"+
			"models: [{name: m}]\nreplicas: [{id: r, url: 'http://127.0.0.1:1', models: [m]}]\n", ports[0], ports[1])
		if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := stopWhileFloodedWithSIGHUP(path, ports[1]); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
	}
}

// stopWhileFloodedWithSIGHUP starts a gateway on the config at path, waits
// until its admin port answers, sends it SIGHUPs without pause until it is
// gone and SIGTERM once they flow, and returns an error unless it exited
// with status 0.
func stopWhileFloodedWithSIGHUP(path string, adminPort int) error {
	c, err := spawn("gateway", childGateway, []string{"--config", path})
	if err != nil {
		return err
	}
	defer c.lifeline.Close()
	configURL := fmt.Sprintf("http://127.0.0.1:%d/admin/config", adminPort)
	if err := c.waitReady(func() (bool, string) { return getOK(configURL) }); err != nil {
		return err
	}
	flooding := make(chan struct{}) // closed once the first SIGHUP is sent, or none could be
	flooded := make(chan struct{})
	go func() {
		defer close(flooded)
		for sent := 0; ; sent++ {
			err := c.cmd.Process.Signal(syscall.SIGHUP)
			if sent == 0 {
				close(flooding)
			}
			if err != nil { // the process is gone
				return
			}
		}
	}()
	<-flooding
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	select {
	case <-c.done:
	case <-time.After(20 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
		return fmt.Errorf("the gateway did not stop within 20 s of SIGTERM; its output:\n%s", c.out.String())
	}
	<-flooded
	if c.waitErr != nil {
		return fmt.Errorf("sent SIGHUPs while it stopped, the gateway exited with %v, want status 0; its output:\n%s", c.waitErr, c.out.String())
	}
	return nil
}

// rss is process pid's resident memory in bytes (Linux's /proc/PID/status
// VmRSS); 0 where it cannot tell.
func rss(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if kb, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(kb), "kB")), 10, 64)
			return n << 10
		}
	}
	return 0
}

// gatewayChild starts the gateway on the config at path as a child
// process, stopped (and required to stop cleanly) when the test ends.
func gatewayChild(t *testing.T, path string) *child {
	t.Helper()
	c, err := spawn("gateway", childGateway, []string{"--config", path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if clean, how := c.stop(); !clean {
			t.Errorf("the gateway did not stop cleanly: it %s\n%s", how, c.out.String())
		}
	})
	return c
}

// TestReplayShadowFlag: --replay-shadow checks a log and fails, naming the
// line, on one that was tampered with, and on an empty one.
func TestReplayShadowFlag(t *testing.T) {
	var out, errOut bytes.Buffer
	empty := filepath.Join(t.TempDir(), "empty.jsonl")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// A gateway writes its first generation as it starts: an empty file
	// is no log of one (its every line may have been removed).
	if err := run(context.Background(), []string{"--replay-shadow", empty}, &out, &errOut); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Errorf("an empty log: %v, %q", err, out.String())
	}
	bad := filepath.Join(t.TempDir(), "bad.jsonl")
	if err := os.WriteFile(bad, []byte(`{"kind":"generation","generation":1,"sum":"00"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run(context.Background(), []string{"--replay-shadow", bad}, &out, &errOut); err == nil || !strings.Contains(err.Error(), "line 1:") {
		t.Errorf("a tampered log: %v, want line 1 named", err)
	}
}

// TestLibraryLogCutsWhatItQuotes: a line net/http's client writes to the
// standard logger reaches the gateway's log at debug without the bytes it
// quotes, which are an engine's response.
func TestLibraryLogCutsWhatItQuotes(t *testing.T) {
	var buf bytes.Buffer
	ll := libraryLog{newLogger(&buf, config.Logging{Level: "debug", Format: "json"})}
	line := "Unsolicited response received on idle HTTP channel starting with \"{\\\"secret\\\":1}\"; err=<nil>\n"
	if n, err := ll.Write([]byte(line)); n != len(line) || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	var rec struct{ Level, Msg string }
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("%v: %s", err, buf.Bytes())
	}
	if rec.Level != "DEBUG" || rec.Msg != "Unsolicited response received on idle HTTP channel starting with" {
		t.Errorf("logged %+v", rec)
	}
	buf.Reset()
	ll = libraryLog{newLogger(&buf, config.Logging{Level: "info"})}
	_, _ = ll.Write([]byte(line))
	if buf.Len() != 0 {
		t.Errorf("logged at info level: %s", buf.Bytes())
	}
}

// TestUsageNamesKeygen: -h names every way to run the binary, the keygen
// subcommand among them.
func TestUsageNamesKeygen(t *testing.T) {
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"-h"}, &out, &errOut)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
	for _, want := range []string{"--config FILE", "--replay-shadow LOG", "keygen --name NAME", "-check", "--version"} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("usage lacks %q:\n%s", want, errOut.String())
		}
	}
}

// TestVersion: --version prints the build on one line and exits 0, with
// no config needed. A test binary has no commit to name; a binary built
// in a checkout (make build) has, from Go's build stamp.
func TestVersion(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"--version"}, &out, &errOut); err != nil {
		t.Fatalf("--version: %v (%s)", err, errOut.String())
	}
	got := out.String()
	if !strings.HasPrefix(got, "inferrail-gateway ") || !strings.HasSuffix(got, runtime.Version()+"\n") || strings.Count(got, "\n") != 1 {
		t.Errorf("--version printed %q: want one line naming the binary and ending with %s", got, runtime.Version())
	}
}

// TestFailedStartLeavesTheFilesAlone: a start that fails, here because
// another process (a running gateway, say) holds its client or admin
// port, or because New refuses the config, exits with status 2 and leaves
// the observability files it shares with that gateway byte for byte as
// they were: the capture is not rotated aside, no generation is appended
// to the shadow log, and nothing is added beside them.
func TestFailedStartLeavesTheFilesAlone(t *testing.T) {
	tests := []struct {
		name string
		// listen returns the client and admin addresses; capture, if
		// not nil, gives capture.path; want is in the failure's message.
		listen  func(t *testing.T) (client, admin string)
		capture func(dir string) string
		want    string
	}{
		{"client_port_held", func(t *testing.T) (string, string) {
			return heldAddr(t), freeAddr(t)
		}, nil, "address already in use"},
		{"admin_port_held", func(t *testing.T) (string, string) {
			return freeAddr(t), heldAddr(t)
		}, nil, "address already in use"},
		{"admin_is_client_by_another_name", func(t *testing.T) (string, string) {
			client := freeAddr(t)
			return client, strings.Replace(client, "127.0.0.1", "localhost", 1)
		}, nil, "address already in use"},
		{"capture_path_is_a_directory", func(t *testing.T) (string, string) {
			return freeAddr(t), freeAddr(t)
		}, func(dir string) string { return dir }, "observability.capture.path"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			files := map[string]string{
				"capture.jsonl":   `{"timestamp":0,"input_length":1,"output_length":1,"hash_ids":[]}` + "\n",
				"decisions.jsonl": `{"request_id":"a"}` + "\n" + `{"request_id":"b","cut sh`,
				"shadow.jsonl":    `{"kind":"generation","generation":1,"sum":"00"}` + "\n" + `{"kind":"decision","cut sh`,
			}
			for name, data := range files {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			capture := filepath.Join(dir, "capture.jsonl")
			if tt.capture != nil {
				capture = tt.capture(dir)
			}
			client, admin := tt.listen(t)
			cfg := fmt.Sprintf("server: {listen: '%s', admin_listen: '%s', reload_interval: 0s}\n"+
				"models: [{name: m}]\nreplicas: [{id: r, url: 'http://127.0.0.1:1', models: [m]}]\n"+
				"observability: {decision_log: {path: '%s', sample_rate: 1}, capture: {path: '%s', sample_rate: 1}, shadow_log: '%s'}\n",
				client, admin, filepath.Join(dir, "decisions.jsonl"), capture, filepath.Join(dir, "shadow.jsonl"))
			path := filepath.Join(t.TempDir(), "gateway.yaml")
			if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
				t.Fatal(err)
			}
			c, err := spawn("gateway", childGateway, []string{"--config", path})
			if err != nil {
				t.Fatal(err)
			}
			defer c.lifeline.Close()
			select {
			case <-c.done:
			case <-time.After(30 * time.Second):
				_ = c.cmd.Process.Kill()
				<-c.done
				t.Fatalf("the gateway did not exit within 30 s; its output:\n%s", c.out.String())
			}
			if code := c.cmd.ProcessState.ExitCode(); code != 2 || !strings.Contains(c.out.String(), tt.want) {
				t.Fatalf("exit status %d, want 2 with %q; its output:\n%s", code, tt.want, c.out.String())
			}
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			if len(entries) != len(files) {
				var names []string
				for _, e := range entries {
					names = append(names, e.Name())
				}
				t.Errorf("the directory holds %q after the failed start, want only %d files", names, len(files))
			}
			for name, want := range files {
				if got, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(got) != want {
					t.Errorf("%s after the failed start: %q, %v; want it unchanged, %q", name, got, err, want)
				}
			}
		})
	}
}

// heldAddr is a loopback address another listener holds until the test
// ends.
func heldAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String()
}

// freeAddr is a loopback address free when asked (freePort).
func freeAddr(t *testing.T) string {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}
