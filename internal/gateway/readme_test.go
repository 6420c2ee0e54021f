package gateway

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/inferrail/inferrail/internal/config"
)

// readmeBlock returns the commands of the first sh block after heading in
// the README, continuation lines joined.
func readmeBlock(t *testing.T, heading string) []string {
	t.Helper()
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(data), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("the README has no heading %q", heading)
	}
	_, rest, ok = strings.Cut(rest, "```sh\n")
	if !ok {
		t.Fatalf("no sh block after %q", heading)
	}
	block, _, _ := strings.Cut(rest, "```")
	var cmds []string
	for _, c := range strings.Split(strings.ReplaceAll(block, "\\\n", " "), "\n") {
		if c = strings.TrimSpace(c); c != "" {
			cmds = append(cmds, c)
		}
	}
	return cmds
}

// shellWords splits a command line as a shell would for the forms the
// README uses: bare words and single-quoted strings.
func shellWords(t *testing.T, line string) []string {
	t.Helper()
	var words []string
	var cur strings.Builder
	inWord, quoted := false, false
	for _, r := range line {
		switch {
		case quoted && r == '\'':
			quoted = false
		case quoted:
			cur.WriteRune(r)
		case r == '\'':
			quoted, inWord = true, true
		case unicode.IsSpace(r):
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case strings.ContainsRune(`"\$;&|<>()`+"`", r):
			t.Fatalf("the walkthrough uses %q, which this test does not interpret: %s", r, line)
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if quoted {
		t.Fatalf("unterminated quote: %s", line)
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

// curl runs a curl command line of the README's forms (-s, -X, -H, -d and
// a localhost URL) with the ports mapped to the test's listeners.
func curl(t *testing.T, line string, ports map[string]string) (int, []byte) {
	t.Helper()
	words := shellWords(t, line)
	if len(words) == 0 || words[0] != "curl" {
		t.Fatalf("not a curl command: %s", line)
	}
	method, target, body := "", "", ""
	header := http.Header{}
	for i := 1; i < len(words); i++ {
		switch w := words[i]; w {
		case "-s":
		case "-X", "-H", "-d":
			if i++; i == len(words) {
				t.Fatalf("%s without its value: %s", w, line)
			}
			switch w {
			case "-X":
				method = words[i]
			case "-H":
				k, v, _ := strings.Cut(words[i], ":")
				header.Set(k, strings.TrimSpace(v))
			case "-d":
				body = words[i]
			}
		default:
			host, path, _ := strings.Cut(w, "/")
			base, ok := ports[host]
			if !ok {
				t.Fatalf("unknown address %q: %s", w, line)
			}
			target = base + "/" + path
		}
	}
	if method == "" {
		method = http.MethodGet
		if body != "" {
			method = http.MethodPost // as curl does with -d
		}
	}
	req, err := http.NewRequest(method, target, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = header
	if body != "" && header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded") // curl's default with -d
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// TestReadmeWalkthrough runs the README's "change routing while it runs"
// commands against a gateway started from deploy/local.yaml, in front of
// simulators, and checks that each does what the README says.
func TestReadmeWalkthrough(t *testing.T) {
	sims := fleetOf(t, 3, true)
	cfg, err := config.Load("../../deploy/local.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for i := range cfg.Replicas {
		cfg.Replicas[i].URL = sims[i].URL()
	}
	gw := startGateway(t, cfg)
	ports := map[string]string{"localhost:8080": gw.url, "localhost:9090": gw.admin}

	cmds := readmeBlock(t, "### Change routing while it runs")
	if len(cmds) != 6 {
		t.Fatalf("the walkthrough has %d commands, this test checks 6: update it", len(cmds))
	}
	var answers [][]byte
	for i, c := range cmds {
		if i == 3 {
			// The shadow decides off the request path: give its worker
			// the moment a person takes to type the next command.
			waitFor(t, "the shadow's decisions", 5*time.Second, func() bool {
				_, body := curl(t, c, ports)
				return !strings.Contains(string(body), `"shadows": []`)
			})
		}
		code, body := curl(t, c, ports)
		if code != http.StatusOK {
			t.Fatalf("command %d answered %d: %s\n%s", i+1, code, c, body)
		}
		answers = append(answers, body)
	}
	var patched configAnswer
	if err := json.Unmarshal(answers[0], &patched); err != nil || patched.Generation != 2 || patched.Result != reloadApplied || patched.ApplySecs <= 0 {
		t.Errorf("the first patch answered %s", answers[0])
	}
	var shadow struct{ Shadows []shadowView }
	if err := json.Unmarshal(answers[3], &shadow); err != nil || len(shadow.Shadows) != 1 ||
		shadow.Shadows[0].Policy != "least_request" || shadow.Shadows[0].Decisions < 1 {
		t.Errorf("/admin/shadow answered %s", answers[3])
	}
	var final struct {
		Generation uint64
		Config     struct {
			Routing map[string]json.RawMessage
		}
	}
	if err := json.Unmarshal(answers[5], &final); err != nil || final.Generation != 3 {
		t.Errorf("the last GET /admin/config answered %s", answers[5])
	}
	if _, ok := final.Config.Routing["split"]; ok {
		t.Errorf("the split is still there after it was patched to null: %s", answers[5])
	}
}

// TestQuickStartFleetIsOne: deploy/local.yaml's header starts its
// simulators with the flags the README's quick start gives them (found by
// a review: without --enable-prompt-tokens-details the engines' usage had
// no cached tokens to show, which the README goes on to point at).
func TestQuickStartFleetIsOne(t *testing.T) {
	flags := func(text, marker string) string {
		t.Helper()
		for _, line := range strings.Split(text, "\n") {
			if _, rest, ok := strings.Cut(line, marker); ok {
				rest, _, _ = strings.Cut(rest, "&")
				return strings.Join(strings.Fields(rest), " ")
			}
		}
		t.Fatalf("no line with %q", marker)
		return ""
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	local, err := os.ReadFile("../../deploy/local.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if r, l := flags(string(readme), "inferrail-sim --port $port"), flags(string(local), "inferrail-sim --port $port"); r != l {
		t.Errorf("the README starts the quick-start simulators with %q, deploy/local.yaml's header with %q", r, l)
	}
}
