package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"pgregory.net/rapid"
)

func TestAppendString(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain", `"plain"`},
		{"quote\" back\\slash", `"quote\" back\\slash"`},
		{"\n\r\t\b\f", `"\n\r\t\b\f"`},
		{"\x00\x1f\x7f", `"\u0000\u001f` + "\x7f" + `"`},
		{"<tag>&amp;", `"<tag>&amp;"`},
		{"héllo 日本 😀", `"héllo 日本 😀"`},
		{"bad\xffbyte", "\"bad\ufffdbyte\""},
	}
	for _, tt := range tests {
		if got := string(AppendString(nil, tt.in)); got != tt.want {
			t.Errorf("AppendString(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

// TestAppendStringDecodes checks that what AppendString writes decodes to
// the string, invalid UTF-8 turned into U+FFFD as encoding/json turns it.
func TestAppendStringDecodes(t *testing.T) {
	for _, s := range []string{"", "plain", "q\"b\\s\n\r\t\x00\x1f", "é日本\u2028", "bad\xffutf8\xc3"} {
		got := AppendString(nil, s)
		want, _ := json.Marshal(strings.ToValidUTF8(s, "\uFFFD"))
		var back, wantBack string
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("AppendString(%q) = %s: %v", s, got, err)
		}
		_ = json.Unmarshal(want, &wantBack)
		if back != wantBack {
			t.Errorf("AppendString(%q) decodes to %q, want %q", s, back, wantBack)
		}
	}
}

func TestAppendASCIIString(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain", `"plain"`},
		{"é\x7f", `"\u00e9\u007f"`},
		{"😀", `"\ud83d\ude00"`},
		{"a\"b", `"a\"b"`},
	}
	for _, tt := range tests {
		if got := string(AppendASCIIString(nil, tt.in)); got != tt.want {
			t.Errorf("AppendASCIIString(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

// TestStringsRoundTrip checks both escapers against encoding/json's decoder.
func TestStringsRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := rapid.String().Draw(t, "s")
		if !utf8.ValidString(s) {
			return
		}
		for _, enc := range [][]byte{AppendString(nil, s), AppendASCIIString(nil, s)} {
			var back string
			if err := json.Unmarshal(enc, &back); err != nil || back != s {
				t.Fatalf("%s decodes to %q (%v), want %q", enc, back, err, s)
			}
		}
	})
}

func TestErrorBodies(t *testing.T) {
	e := ModelNotFound("foo")
	if got, want := string(e.AppendJSON(nil)), "{\"error\":{\"message\":\"The model `foo` does not exist.\",\"type\":\"NotFoundError\",\"param\":\"model\",\"code\":404}}"; got != want {
		t.Errorf("AppendJSON = %s, want %s", got, want)
	}
	e = BadRequest("bad ü", "")
	if got, want := string(e.AppendStreamJSON(nil)), `{"error": {"message": "bad \u00fc", "type": "BadRequestError", "param": null, "code": 400}}`; got != want {
		t.Errorf("AppendStreamJSON = %s, want %s", got, want)
	}
	e = OpenAIError(429, "tokens", "rate_limit_exceeded", "Rate limit reached.", "")
	if got, want := string(e.AppendJSON(nil)), `{"error":{"message":"Rate limit reached.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`; got != want {
		t.Errorf("AppendJSON with a code = %s, want %s", got, want)
	}
	if got, want := string(e.AppendStreamJSON(nil)), `{"error": {"message": "Rate limit reached.", "type": "tokens", "param": null, "code": "rate_limit_exceeded"}}`; got != want {
		t.Errorf("AppendStreamJSON with a code = %s, want %s", got, want)
	}
}

// chunked hands out its data in pieces of the given sizes.
type chunked struct {
	data  []byte
	sizes []int
}

func (c *chunked) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := len(c.data)
	if len(c.sizes) > 0 {
		n = max(1, min(n, c.sizes[0]))
		c.sizes = c.sizes[1:]
	}
	n = copy(p, c.data[:n])
	c.data = c.data[n:]
	return n, nil
}

func TestSSEReaderAnyChunking(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		payloads := rapid.SliceOfN(rapid.StringMatching(`[^\r\n]{1,40}`), 1, 10).Draw(t, "payloads")
		var stream []byte
		for _, p := range payloads {
			stream = AppendEvent(stream, []byte(p))
		}
		if rapid.Bool().Draw(t, "crlf") {
			stream = bytes.ReplaceAll(stream, []byte("\n"), []byte("\r\n"))
		}
		sizes := rapid.SliceOf(rapid.IntRange(1, 7)).Draw(t, "sizes")
		r := NewSSEReader(&chunked{data: stream, sizes: sizes}, 0)
		for i, want := range payloads {
			got, err := r.Next()
			if err != nil || string(got) != want {
				t.Fatalf("event %d = %q, %v; want %q", i, got, err, want)
			}
		}
		if _, err := r.Next(); !errors.Is(err, io.EOF) {
			t.Fatalf("after the last event: %v, want EOF", err)
		}
	})
}

func TestSSEReaderEdges(t *testing.T) {
	r := NewSSEReader(strings.NewReader(": comment\nevent: x\ndata: a\ndata: b\nid: 1\n\ndata: cut"), 0)
	if got, err := r.Next(); err != nil || string(got) != "a\nb" {
		t.Fatalf("Next = %q, %v; want multi-line data a\\nb", got, err)
	}
	if _, err := r.Next(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("cut event: %v, want ErrUnexpectedEOF", err)
	}
	r = NewSSEReader(strings.NewReader("data: "+strings.Repeat("x", 100)+"\n\n"), 10)
	if _, err := r.Next(); !errors.Is(err, ErrEventTooLarge) {
		t.Fatalf("oversized event: %v, want ErrEventTooLarge", err)
	}
}

// naiveSSE is a reference for SSEReader over a whole stream: split at LF,
// drop one CR before each LF, dispatch the data lines at each blank line.
// It returns the events and how the stream ended (io.EOF, or
// io.ErrUnexpectedEOF for one cut inside an event), and for the size
// limit the longest line with its end and the data of an event cut short.
func naiveSSE(stream []byte) (events []string, longest int, cut string, end error) {
	lines := bytes.Split(stream, []byte("\n"))
	last := lines[len(lines)-1] // after the last LF: a line not ended
	lines = lines[:len(lines)-1]
	var data []string
	for _, l := range lines {
		longest = max(longest, len(l)+1)
		l = bytes.TrimSuffix(l, []byte("\r"))
		switch {
		case len(l) == 0:
			if data != nil {
				events = append(events, strings.Join(data, "\n"))
			}
			data = nil
		case l[0] == ':':
		default:
			field, value, _ := strings.Cut(string(l), ":")
			if field == "data" {
				data = append(data, strings.TrimPrefix(value, " "))
			}
		}
	}
	longest = max(longest, len(last))
	if data != nil || len(bytes.TrimRight(last, "\r")) > 0 {
		return events, longest, strings.Join(data, "\n"), io.ErrUnexpectedEOF
	}
	return events, longest, "", io.EOF
}

// cycled reads its data size bytes at a time (1 at the least).
type cycled struct {
	data []byte
	size int
}

func (c *cycled) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p, c.data[:min(len(c.data), c.size)])
	c.data = c.data[n:]
	return n, nil
}

// FuzzSSEReader: read in chunks of any size, SSEReader gives naiveSSE's
// events and ending; under a limit it gives a prefix of them and refuses
// only where an event or a line is over the limit.
func FuzzSSEReader(f *testing.F) {
	f.Add([]byte("data: {\"a\":1}\n\ndata: [DONE]\n\n"), 3)
	f.Add([]byte("data:x\r\n\r\n: c\n\n"), 1)
	f.Add([]byte("\n\n\ndata"), 2)
	f.Add([]byte("data\nevent: e\ndata:  two\r\rdata: x\n\n"), 5)
	f.Fuzz(func(t *testing.T, data []byte, size int) {
		if len(data) > 1<<16 {
			return
		}
		size = max(1, size%64)
		want, longest, cut, wantEnd := naiveSSE(data)
		read := func(limit int) ([]string, error) {
			r := NewSSEReader(&cycled{data: data, size: size}, limit)
			var got []string
			for {
				ev, err := r.Next()
				if err != nil {
					return got, err
				}
				if len(ev) > limit {
					t.Fatalf("event of %d bytes over the %d limit", len(ev), limit)
				}
				got = append(got, string(ev))
			}
		}
		got, end := read(len(data) + 8)
		if !slices.Equal(got, want) || !errors.Is(end, wantEnd) {
			t.Fatalf("%q in chunks of %d: events %q ending %v, want %q ending %v", data, size, got, end, want, wantEnd)
		}
		const limit = 16
		got, end = read(limit)
		if len(got) > len(want) || !slices.Equal(got, want[:len(got)]) {
			t.Fatalf("%q under a limit: events %q, not a prefix of %q", data, got, want)
		}
		if errors.Is(end, ErrEventTooLarge) {
			next := cut // the event it was reading when refused
			if len(got) < len(want) {
				next = want[len(got)]
			}
			over := longest > limit+2 || len(next) > limit
			if !over {
				t.Fatalf("%q: refused as too large after %q, though no line or event is", data, got)
			}
		} else if !slices.Equal(got, want) || !errors.Is(end, wantEnd) {
			t.Fatalf("%q under a limit: events %q ending %v, want %q ending %v", data, got, end, want, wantEnd)
		}
	})
}

func TestEndsWithDone(t *testing.T) {
	tests := []struct {
		tail string
		want bool
	}{
		{"data: [DONE]\n\n", true},
		{"data:[DONE]\n\n", true},
		{"data: [DONE]\r\n\r\n", true},
		{"data: [DONE]", true}, // every byte of the stream came
		{"data: {\"a\":1}\n\ndata: [DONE]\n\n", true},
		{"[DONE]\n\n", false},
		{"", false},
		{"data: {\"a\":1}\n\n", false},
		{"data: [DONE", false},
		{"data:  [DONE]\n\n", false}, // the data is " [DONE]"
		{"xdata: [DONE]\n\n", false},
		{"data: {\"content\":\"data: [DONE]\"}\n\n", false},
		{"data: [DONE]\n\ndata: {\"a\":1}\n\n", false},
		{"data: [DONE]\n\n: keep-alive\n\n", true},
		{"data: [DONE]\n\n:\n:x\r\n", true},
		{"data: [DONE]\n\n: cut mid-comm", true},
		{": data: [DONE]\n\n", false},
		{"data: {}\n\n: data: [DONE]\n\n", false},
	}
	for _, tt := range tests {
		if got := EndsWithDone([]byte(tt.tail)); got != tt.want {
			t.Errorf("EndsWithDone(%q) = %v, want %v", tt.tail, got, tt.want)
		}
	}
}

// A stream cut anywhere ends with [DONE] only when it was cut after the
// [DONE] event's data: every event before it came whole.
func TestEndsWithDoneOnlyWhole(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		payloads := rapid.SliceOfN(rapid.StringMatching(`[^\r\n]{1,40}|data: \[DONE\]|x\[DONE\]`), 0, 6).Filter(func(ps []string) bool {
			return !slices.Contains(ps, string(Done)) // only the last event is [DONE]
		}).Draw(t, "payloads")
		done := rapid.Bool().Draw(t, "done")
		var stream []byte
		for _, p := range payloads {
			stream = AppendEvent(stream, []byte(p))
		}
		if done {
			stream = AppendEvent(stream, Done)
		}
		if rapid.Bool().Draw(t, "crlf") {
			stream = bytes.ReplaceAll(stream, []byte("\n"), []byte("\r\n"))
		}
		whole := bytes.LastIndex(stream, Done) + len(Done) // where [DONE]'s data ends
		cut := rapid.IntRange(0, len(stream)).Draw(t, "cut")
		want := done && cut >= whole
		if got := EndsWithDone(stream[:cut]); got != want {
			t.Fatalf("EndsWithDone(%q) = %v, want %v", stream[:cut], got, want)
		}
	})
}

// FuzzEndsWithDone: EndsWithDone, and a DoneWatch written the stream in
// pieces, agree with reading the stream's last line but comments, any line
// ends normalised, as the [DONE] event's data line.
func FuzzEndsWithDone(f *testing.F) {
	f.Add([]byte("data: {}\n\ndata: [DONE]\n\n"))
	f.Add([]byte("data:[DONE]\r\n\r\n"))
	f.Add([]byte("x\rdata: [DONE]"))
	f.Add([]byte("data:  [DONE]\n\n"))
	f.Add([]byte("data: [DONE]\n\n: ping\n\n"))
	f.Fuzz(func(t *testing.T, tail []byte) {
		lines := strings.ReplaceAll(strings.ReplaceAll(string(tail), "\r\n", "\n"), "\r", "\n")
		lines = strings.TrimRight(lines, "\n")
		last := lines[strings.LastIndexByte(lines, '\n')+1:]
		for strings.HasPrefix(last, ":") && strings.Contains(lines, "\n") { // comments after it
			lines = strings.TrimRight(lines[:strings.LastIndexByte(lines, '\n')], "\n")
			last = lines[strings.LastIndexByte(lines, '\n')+1:]
		}
		want := last == "data: [DONE]" || last == "data:[DONE]"
		if got := EndsWithDone(tail); got != want {
			t.Errorf("EndsWithDone(%q) = %v, want %v", tail, got, want)
		}
		for _, step := range []int{1, 3, 7, max(len(tail), 1)} {
			var w DoneWatch
			for p := tail; len(p) > 0; p = p[min(step, len(p)):] {
				w.Write(p[:min(step, len(p))])
			}
			if w.Done() != want {
				t.Errorf("DoneWatch of %q in pieces of %d: %v, want %v", tail, step, w.Done(), want)
			}
		}
	})
}

// TestDoneWatchAgreesWithWholeStream: a DoneWatch written a stream in
// pieces, cut at any bytes, tells what EndsWithDone tells of the whole
// stream, after every piece; however many comment lines follow [DONE]
// (found by a review: the gateway looked at the stream's last 1,024 bytes,
// and 78 keep-alive lines after [DONE] made a whole stream a cut one).
func TestDoneWatchAgreesWithWholeStream(t *testing.T) {
	line := rapid.SampledFrom([]string{
		"data: [DONE]", "data:[DONE]", "data:  [DONE]", "data: [DONE]x", "xdata: [DONE]", ": data: [DONE]",
		"data: {\"a\":1}", ": keep-alive", ":", "", "event: x", "data: [DON", "data: {\"content\":\"data: [DONE]\"}",
	})
	end := rapid.SampledFrom([]string{"\n", "\r\n", "\r", "\n\n", "\r\n\r\n"})
	rapid.Check(t, func(t *rapid.T) {
		var stream []byte
		for range rapid.IntRange(0, 8).Draw(t, "lines") {
			stream = append(stream, line.Draw(t, "line")...)
			stream = append(stream, end.Draw(t, "end")...)
		}
		if rapid.Bool().Draw(t, "keepalives") { // past any fixed window
			stream = append(stream, bytes.Repeat([]byte(": keepalive\n"), rapid.IntRange(1, 300).Draw(t, "n"))...)
		}
		stream = append(stream, rapid.SliceOfN(rapid.SampledFrom([]byte("data:[DONE] \r\n:x")), 0, 16).Draw(t, "tail")...)
		var w DoneWatch
		for rest := stream; len(rest) > 0; {
			n := rapid.IntRange(1, len(rest)).Draw(t, "piece")
			w.Write(rest[:n])
			rest = rest[n:]
			seen := stream[:len(stream)-len(rest)]
			if got, want := w.Done(), EndsWithDone(seen); got != want {
				t.Fatalf("after %q: Done() = %v, EndsWithDone = %v", seen, got, want)
			}
		}
		if w.Done() != EndsWithDone(stream) {
			t.Fatalf("%q: Done() = %v, EndsWithDone = %v", stream, w.Done(), EndsWithDone(stream))
		}
	})
}
