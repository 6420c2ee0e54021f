package workload

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// writeLongShareGPT writes a seeded ShareGPT file of conversations long
// enough that a replay under maxPrompt cuts most of them, a quarter ending
// on the user's message: what a replay sends is far from the file's turns.
func writeLongShareGPT(t testing.TB) string {
	t.Helper()
	r := rand.New(rand.NewPCG(1, 2))
	vocab := strings.Fields("cache block prefix engine replica token prompt route queue decode prefill share warm cold hit miss")
	words := func(lo, hi int) string {
		ws := make([]string, lo+r.IntN(hi-lo+1))
		for i := range ws {
			ws[i] = vocab[r.IntN(len(vocab))]
		}
		return strings.Join(ws, " ")
	}
	type msg struct {
		From  string `json:"from"`
		Value string `json:"value"`
	}
	type conv struct {
		ID            int   `json:"id"`
		Conversations []msg `json:"conversations"`
	}
	var convs []conv
	for i := range 80 {
		c := conv{ID: i}
		turns := 10 + r.IntN(15)
		for j := range turns {
			c.Conversations = append(c.Conversations, msg{"human", words(100, 300)})
			if j < turns-1 || r.IntN(4) > 0 {
				c.Conversations = append(c.Conversations, msg{"gpt", words(60, 250)})
			}
		}
		convs = append(convs, c)
	}
	b, err := json.Marshal(convs)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "sharegpt.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// longMaxPrompt cuts writeLongShareGPT's conversations after a few turns.
const longMaxPrompt = 3000

// TestShareGPTPerStart: the requests per start that set the start rate are
// those start makes, against a naive count over one pass through every
// conversation (a fixed output length makes every cut certain).
func TestShareGPTPerStart(t *testing.T) {
	spec := Spec{Workload: W2, Model: "m", Rate: 1, Requests: 1, Seed: 3, ShareGPTPath: writeLongShareGPT(t),
		MaxPromptTokens: longMaxPrompt, OutputTokens: 120}.WithDefaults()
	src, err := readShareGPTSource(t.Context(), newGen(spec))
	if err != nil {
		t.Fatal(err)
	}
	var reqs []Request
	for range src.convs {
		reqs = src.start(0, reqs)
	}
	want := float64(len(reqs)) / float64(len(src.convs))
	if got := src.perStart(); math.Abs(got-want) > 1e-9 {
		t.Errorf("perStart %.3f, start makes %.3f a conversation", got, want)
	}
	if src.most <= 2*int(want) {
		t.Fatalf("the file's conversations (up to %d turns) are not cut much (%.1f sent): the test proves nothing", src.most, want)
	}
}

// TestShareGPTRate: a replay of conversations that start cuts delivers the
// rate asked for: over three seeds the requests scheduled in the window
// are within four standard deviations of rate × duration, the deviation
// that of a compound Poisson count (the root of the sum of each
// conversation's requests squared).
func TestShareGPTRate(t *testing.T) {
	path := writeLongShareGPT(t)
	const rate, duration = 8.0, 10 * time.Minute
	total, squares := 0, 0.0
	for seed := range uint64(3) {
		reqs := generate(t, Spec{Workload: W2, Model: "m", Rate: rate, Duration: duration, Seed: seed, ShareGPTPath: path,
			MaxPromptTokens: longMaxPrompt})
		per := map[string]int{}
		for _, r := range reqs {
			per[r.Session]++
		}
		for _, n := range per {
			squares += float64(n * n)
		}
		total += len(reqs)
	}
	want := 3 * rate * duration.Seconds()
	t.Logf("%.2f req/s asked %v", float64(total)/3/duration.Seconds(), rate)
	if dev := math.Sqrt(squares); math.Abs(float64(total)-want) > 4*dev {
		t.Errorf("%d requests over three runs, %.2f req/s; want %.0f (%.0f req/s) within %.0f", total,
			float64(total)/3/duration.Seconds(), want, rate, 4*dev)
	}
}

// ReadShareGPT gives the SHA-256 of the file's bytes; GenerateShareGPT
// makes from the conversations read what GenerateRequests makes from the
// file; a spec recording one digest is not generated from a file that has
// another (edited in place since it was planned).
func TestShareGPTDigest(t *testing.T) {
	path := writeLongShareGPT(t)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	convs, digest, err := ReadShareGPT(t.Context(), path)
	if want := fmt.Sprintf("%x", sha256.Sum256(b)); err != nil || digest != want {
		t.Fatalf("ReadShareGPT digest %q, %v; want %q", digest, err, want)
	}
	spec := Spec{Workload: W2, Model: "m", Rate: 2, Requests: 20, Seed: 1, ShareGPTPath: path, ShareGPTDigest: digest}
	fromFile, err := GenerateRequests(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	fromRead, err := GenerateShareGPT(t.Context(), spec, convs)
	if err != nil {
		t.Fatal(err)
	}
	a, errA := fromFile.All(t.Context())
	c, errC := fromRead.All(t.Context())
	if errA != nil || errC != nil || len(a) != 20 || !reflect.DeepEqual(a, c) {
		t.Errorf("GenerateShareGPT differs from GenerateRequests (%d and %d requests; %v, %v)", len(c), len(a), errC, errA)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := GenerateRequests(t.Context(), spec); err == nil || !strings.Contains(err.Error(), "not those planned") {
		t.Errorf("a file edited since it was planned: %v, want it refused", err)
	}
	noPath := Spec{Workload: W2, Model: "m", Rate: 2, Requests: 20, ShareGPTDigest: digest}
	if err := noPath.Validate(); err == nil || !strings.Contains(err.Error(), "sharegpt_digest: only with sharegpt_path") {
		t.Errorf("a digest without a file: %v", err)
	}
}

// A ShareGPT file refused says why: the field of the wrong JSON type and
// what it wants, not the Go type it was decoded into, and what no
// conversation had when none is usable (a file of "role"/"content"
// messages was "no usable conversation" and nothing more).
func TestShareGPTRefusalsSayWhy(t *testing.T) {
	human := `{"from": "human", "value": "hello there"}`
	tests := []struct {
		name, file string
		maxPrompt  int
		want       string
	}{
		{"value_a_number", `[{"conversations": [` + human + `]}, {"conversations": [{"from": "human", "value": 3}]}]`, 0,
			`conversation 1: conversations.0.value: want a string, not number`},
		{"conversations_a_string", `[{"conversations": "hi"}]`, 0,
			`conversation 0: conversations: want an array of {"from", "value"} messages, not string`},
		{"role_content", `[{"conversations": [{"role": "user", "content": "hi"}]}]`, 0,
			`none starts with a user's message ({"from": "human" or "user", "value": text}, a system message before it; "role" and "content" are not read)`},
		{"gpt_first", `[{"conversations": [{"from": "gpt", "value": "hi"}, ` + human + `]}]`, 0,
			`none starts with a user's message`},
		{"every_first_turn_too_long", `[{"conversations": [` + human + `]}, {"conversations": [` + human + `]}]`, 2,
			`the first turn of each of its 2 is past max_prompt_tokens (2)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "sharegpt.json")
			if err := os.WriteFile(path, []byte(tt.file), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Generate(Spec{Workload: W2, Model: "m", Rate: 1, Requests: 1, ShareGPTPath: path, MaxPromptTokens: tt.maxPrompt})
			if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "struct") {
				t.Fatalf("Generate: %v; want %q", err, tt.want)
			}
		})
	}
}

// A ShareGPT file is one array: what follows it is refused, where two
// files joined with cat replayed the first one's conversations alone.
func TestShareGPTOneArray(t *testing.T) {
	conv := `{"id": "a", "conversations": [{"from": "human", "value": "hi"}]}`
	tests := []struct {
		name, file string
		kept       int
		err        string
	}{
		{"one_array", "[" + conv + "," + conv + "]", 2, ""},
		{"white_space_after", "[" + conv + "]\n \t\n", 1, ""},
		{"two_arrays", "[" + conv + "]\n[" + conv + "," + conv + "]\n", 0, "after the array of conversations: another array"},
		{"an_object_after", "[" + conv + "]" + conv, 0, "after the array of conversations: more JSON"},
		{"not_json_after", "[" + conv + "] oops", 0, "after the array of conversations: bytes that are not JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			convs, err := ParseShareGPT(strings.NewReader(tt.file))
			if tt.err == "" && (err != nil || len(convs) != tt.kept) {
				t.Fatalf("ParseShareGPT = %d, %v; want %d", len(convs), err, tt.kept)
			}
			if tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
				t.Fatalf("ParseShareGPT = %d, %v; want %q", len(convs), err, tt.err)
			}
		})
	}
}
