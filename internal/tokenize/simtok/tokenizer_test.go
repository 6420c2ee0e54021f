package simtok

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"pgregory.net/rapid"

	"github.com/inferrail/inferrail/internal/tokenize"
)

func TestSimEncode(t *testing.T) {
	sim := New()
	piece := func(s string) int { return pieceID(s) }
	tests := []struct {
		text string
		want []int
	}{
		{"", nil},
		{"a", []int{piece("a")}},
		{"hello world", []int{piece("hel"), piece("lo "), piece("wor"), piece("ld")}},
		{"a,b", []int{piece("a,"), piece("b")}},
		{"<|im_start|>user\nhi<|im_end|>", []int{2, piece("use"), piece("r\n"), piece("hi"), 3}},
		{"x<|endoftext|>", []int{piece("x"), EOSID}},
		{"<|im_start", []int{piece("<"), piece("|"), piece("im_"), piece("sta"), piece("rt")}},
		{"é", []int{piece("é")}},
		{"日本", []int{piece("日"), piece("本")}},
	}
	for _, tt := range tests {
		got := sim.Encode(nil, tt.text)
		if !slices.Equal(got, tt.want) {
			t.Errorf("Encode(%q) = %v, want %v", tt.text, got, tt.want)
		}
		if n := sim.Count(tt.text); n != len(tt.want) {
			t.Errorf("Count(%q) = %d, want %d", tt.text, n, len(tt.want))
		}
	}
}

// text draws strings rich in special-token fragments, punctuation and
// multi-byte runes.
func text() *rapid.Generator[string] {
	atoms := rapid.SampledFrom([]string{
		"a", "bc", "def", " ", "\n", ",", "<", "|", "<|", "|>", "im_start", IMStart, IMEnd,
		EOS, Think, "é", "日本語", "\x00", "\xff", "hello ", "world",
	})
	return rapid.Custom(func(t *rapid.T) string {
		parts := rapid.SliceOfN(atoms, 0, 40).Draw(t, "parts")
		return strings.Join(parts, "")
	})
}

func TestSimRoundTrip(t *testing.T) {
	sim := New()
	rapid.Check(t, func(t *rapid.T) {
		s := rapid.OneOf(text(), rapid.String()).Draw(t, "s")
		ids := sim.Encode(nil, s)
		if got := sim.Decode(ids, false); got != s {
			t.Fatalf("Decode(Encode(%q)) = %q", s, got)
		}
		for _, id := range ids {
			if !sim.Valid(id) {
				t.Fatalf("Encode(%q) gave invalid id %d", s, id)
			}
		}
		if n := sim.Count(s); n != len(ids) {
			t.Fatalf("Count(%q) = %d, Encode gave %d ids", s, n, len(ids))
		}
	})
}

// TestSimPrefixStable checks that shared text means shared tokens: the ids of
// a prefix, but possibly its last, begin the ids of any longer text. A special
// token the suffix completes ("<|" + "im_start|>") starts afresh, so the
// prefix is cut where that token begins.
func TestSimPrefixStable(t *testing.T) {
	sim := New()
	rapid.Check(t, func(t *rapid.T) {
		p := text().Draw(t, "prefix")
		x := text().Draw(t, "suffix")
		whole := sim.Encode(nil, p+x)
		head := sim.Encode(nil, p[:straddled(p+x, len(p))])
		if len(head) > 0 {
			head = head[:len(head)-1]
		}
		if !slices.Equal(whole[:min(len(head), len(whole))], head) {
			t.Fatalf("Encode(%q) = %v does not start with %v from Encode(%q)", p+x, whole, head, p)
		}
	})
}

// straddled returns where the special token of text that spans byte cut
// begins, or cut when none does.
func straddled(text string, cut int) int {
	for off := 0; off < cut; {
		i, sp := nextSpecial(text[off:])
		if sp < 0 || off+i >= cut {
			break
		}
		end := off + i + len(specials[sp])
		if end > cut {
			return off + i
		}
		off = end
	}
	return cut
}

// TestSimBoundaryLeftOnly checks the stronger property: when a prefix ends at
// a piece boundary, all of its ids are shared.
func TestSimBoundaryLeftOnly(t *testing.T) {
	sim := New()
	rapid.Check(t, func(t *rapid.T) {
		p := text().Draw(t, "prefix") + " "
		x := text().Draw(t, "suffix")
		head := sim.Encode(nil, p)
		whole := sim.Encode(nil, p+x)
		if len(whole) < len(head) || !slices.Equal(whole[:len(head)], head) {
			t.Fatalf("Encode(%q) = %v does not start with all of %v", p+x, whole, head)
		}
	})
}

func TestBabblerRetokenizes(t *testing.T) {
	sim := New()
	rapid.Check(t, func(t *rapid.T) {
		seed := rapid.Uint64().Draw(t, "seed")
		n := rapid.IntRange(0, 200).Draw(t, "n")
		b := NewBabbler(seed)
		ids := make([]int, n)
		for i := range ids {
			ids[i] = b.Next()
			if sim.IsSpecial(ids[i]) {
				t.Fatalf("babbler spoke special id %d", ids[i])
			}
		}
		// The spoken text, inside a template that follows it with a
		// special token or more text, encodes back to the same ids.
		spoken := sim.Decode(ids, true)
		if !utf8.ValidString(spoken) {
			t.Fatalf("spoken text %q is not UTF-8", spoken)
		}
		if got := sim.Encode(nil, spoken); !slices.Equal(got, ids) {
			t.Fatalf("Encode(%q) = %v, want %v", spoken, got, ids)
		}
		got := sim.Encode(nil, "assistant\n"+spoken+IMEnd)
		want := append(sim.Encode(nil, "assistant\n"), ids...)
		want = append(want, 3)
		if !slices.Equal(got, want) {
			t.Fatalf("in context: got %v, want %v", got, want)
		}
		b2 := NewBabbler(seed)
		for i, id := range ids {
			if got := b2.Next(); got != id {
				t.Fatalf("babbler not deterministic at %d: %d != %d", i, got, id)
			}
		}
	})
}

func TestRenderChat(t *testing.T) {
	chat := &tokenize.Chat{
		Messages: []tokenize.ChatMessage{
			{Role: "system", Content: "Be brief."},
			{Role: "user", Content: "Hi"},
			{Role: "assistant", Content: "", ToolCalls: []tokenize.ToolCall{{Name: "f", Arguments: `{ "x": 1 }`}}},
		},
		Tools:               nil,
		AddGenerationPrompt: true,
	}
	want := "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n" +
		"<|im_start|>assistant\n<tool_call>{\"name\":\"f\",\"arguments\":{\"x\":1}}</tool_call><|im_end|>\n" +
		"<|im_start|>assistant\n"
	if got := RenderChat(chat); got != want {
		t.Errorf("RenderChat = %q, want %q", got, want)
	}
	chat.AddGenerationPrompt = false
	chat.ContinueFinalMessage = true
	chat.Messages = chat.Messages[:2]
	want = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi"
	if got := RenderChat(chat); got != want {
		t.Errorf("RenderChat continued = %q, want %q", got, want)
	}
}

// TestRenderChatDeveloper: developer messages are fitted to the builtin:sim
// template as vLLM fits them to a template that does not name the role:
// system messages, all merged into one at the front when one stands
// elsewhere.
func TestRenderChatDeveloper(t *testing.T) {
	const s, e = IMStart, IMEnd + "\n"
	tests := []struct {
		name, messages, want string
	}{
		{"first", `[{"role":"developer","content":"D"},{"role":"user","content":"U"}]`, s + "system\nD" + e + s + "user\nU" + e},
		{"after_system", `[{"role":"system","content":"S"},{"role":"user","content":"U"},{"role":"developer","content":"D"}]`, s + "system\nS\n\nD" + e + s + "user\nU" + e},
		{"after_user", `[{"role":"user","content":"U"},{"role":"developer","content":["a","b"]}]`, s + "system\na\nb" + e + s + "user\nU" + e},
		{"empty_left_out", `[{"role":"system","content":""},{"role":"user","content":"U"},{"role":"developer","content":"D"},{"role":"assistant","content":"A"}]`, s + "system\nD" + e + s + "user\nU" + e + s + "assistant\nA" + e},
		{"no_developer_no_merge", `[{"role":"system","content":"S1"},{"role":"user","content":"U"},{"role":"system","content":"S2"}]`, s + "system\nS1" + e + s + "user\nU" + e + s + "system\nS2" + e},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := tokenize.ParseChatRequest([]byte(`{"messages":` + tt.messages + `,"add_generation_prompt":false}`))
			if err != nil {
				t.Fatal(err)
			}
			if got := RenderChat(p.Chat); got != tt.want {
				t.Errorf("RenderChat(%s) = %q, want %q", tt.messages, got, tt.want)
			}
		})
	}
	// The final message to continue is the last after the merge.
	p, err := tokenize.ParseChatRequest([]byte(`{"messages":[{"role":"user","content":"U"},{"role":"developer","content":"D"}],"continue_final_message":true,"add_generation_prompt":false}`))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := RenderChat(p.Chat), s+"system\nD"+e+s+"user\nU"; got != want {
		t.Errorf("RenderChat continued = %q, want %q", got, want)
	}
}

// TestSimMultiTurnReuse checks that a reply sent back as history leaves the
// first turn's prompt and reply ids as a prefix of the second turn's prompt.
func TestSimMultiTurnReuse(t *testing.T) {
	sim := New()
	turn1 := &tokenize.Chat{Messages: []tokenize.ChatMessage{{Role: "user", Content: "Tell me, please."}}, AddGenerationPrompt: true}
	p1 := sim.Encode(nil, RenderChat(turn1))
	b := NewBabbler(7)
	var reply []int
	for range 37 {
		reply = append(reply, b.Next())
	}
	turn2 := &tokenize.Chat{Messages: append(turn1.Messages,
		tokenize.ChatMessage{Role: "assistant", Content: sim.Decode(reply, true)},
		tokenize.ChatMessage{Role: "user", Content: "More?"}), AddGenerationPrompt: true}
	p2 := sim.Encode(nil, RenderChat(turn2))
	prefix := append(slices.Clone(p1), reply...)
	if !slices.Equal(p2[:len(prefix)], prefix) {
		t.Fatalf("second turn %v does not start with first prompt and reply %v", p2, prefix)
	}
}

func FuzzSimEncode(f *testing.F) {
	for _, s := range []string{"", "hello world", IMStart + "user\n", "<|<|im_end|>", "\xff\xfe", "日本語"} {
		f.Add(s)
	}
	sim := New()
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > 1<<16 {
			return
		}
		ids := sim.Encode(nil, s)
		if got := sim.Decode(ids, false); got != s {
			t.Fatalf("Decode(Encode(%q)) = %q", s, got)
		}
	})
}

func BenchmarkSimEncode(b *testing.B) {
	sim := New()
	text := strings.Repeat("The quick brown fox jumps over the lazy dog, again and again. ", 400)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	dst := make([]int, 0, len(text))
	for b.Loop() {
		dst = sim.Encode(dst[:0], text)
	}
}
