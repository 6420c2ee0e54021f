package zmtp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func greetingWith(edit func(g []byte)) []byte {
	g := appendGreeting(nil, 1)
	if edit != nil {
		edit(g)
	}
	return g
}

func TestReadGreeting(t *testing.T) {
	for _, tc := range []struct {
		name      string
		in        []byte
		wantMinor byte
		wantErr   error
	}{
		{"3.1", greetingWith(nil), 1, nil},
		{"3.0", greetingWith(func(g []byte) { g[11] = 0 }), 0, nil},
		{"4.2 downgrades", greetingWith(func(g []byte) { g[10], g[11] = 4, 2 }), 1, nil},
		{"garbage", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n" + string(make([]byte, 64))), 0, ErrSignature},
		{"bad signature end", greetingWith(func(g []byte) { g[9] = 0 }), 0, ErrSignature},
		{"ZMTP 2", greetingWith(func(g []byte) { g[10] = 1 }), 0, ErrVersion},
		{"CURVE", greetingWith(func(g []byte) { copy(g[12:], "CURVE") }), 0, ErrMechanism},
		{"truncated", greetingWith(nil)[:40], 0, io.ErrUnexpectedEOF},
		{"only signature", greetingWith(nil)[:10], 0, io.ErrUnexpectedEOF},
		{"empty", nil, 0, io.ErrUnexpectedEOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := readGreeting(bytes.NewReader(tc.in))
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if err == nil && (g.major != 3 || g.minor != tc.wantMinor) {
				t.Fatalf("version %d.%d, want 3.%d", g.major, g.minor, tc.wantMinor)
			}
		})
	}
}

// longHeader is a long frame header claiming size bytes.
func longHeader(flags byte, size uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{flags | flagLong}, size)
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func TestFrameReader(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 300)
	for _, tc := range []struct {
		name    string
		in      []byte
		max     int64
		want    [][][]byte // messages before the error
		wantCmd string
		wantErr error
	}{
		{name: "one frame", in: appendMessage(nil, [][]byte{[]byte("a")}), want: [][][]byte{{[]byte("a")}}, wantErr: io.EOF},
		{name: "multipart short and long", in: appendMessage(nil, [][]byte{[]byte("t"), {}, big}),
			want: [][][]byte{{[]byte("t"), {}, big}}, wantErr: io.EOF},
		{name: "two messages", in: cat(appendMessage(nil, [][]byte{[]byte("a")}), appendMessage(nil, [][]byte{[]byte("b")})),
			want: [][][]byte{{[]byte("a")}, {[]byte("b")}}, wantErr: io.EOF},
		{name: "long header for short body", in: cat(longHeader(0, 2), []byte("hi")), want: [][][]byte{{[]byte("hi")}}, wantErr: io.EOF},
		{name: "command", in: appendCommand(nil, "SUBSCRIBE", []byte("kv")), wantCmd: "SUBSCRIBE", wantErr: nil},
		{name: "2^62 bytes claimed", in: longHeader(0, 1<<62), wantErr: ErrTooLarge},
		{name: "2^64-1 bytes claimed", in: longHeader(0, ^uint64(0)), wantErr: ErrTooLarge},
		{name: "just over max", in: appendMessage(nil, [][]byte{make([]byte, 1000-frameCost+1)}), max: 1000, wantErr: ErrTooLarge},
		{name: "exactly max", in: appendMessage(nil, [][]byte{make([]byte, 1000-frameCost)}), max: 1000,
			want: [][][]byte{{make([]byte, 1000-frameCost)}}, wantErr: io.EOF},
		{name: "empty frames flood", in: bytes.Repeat([]byte{flagMore, 0}, 100), max: 1000, wantErr: ErrTooLarge},
		{name: "multipart over max", in: appendMessage(nil, [][]byte{make([]byte, 400), make([]byte, 400), make([]byte, 400)}), max: 1000, wantErr: ErrTooLarge},
		{name: "reserved flag", in: []byte{0x08, 0}, wantErr: ErrFlags},
		{name: "command with MORE", in: []byte{flagCommand | flagMore, 2, 1, 'x'}, wantErr: ErrFlags},
		{name: "command inside message", in: cat([]byte{flagMore, 1, 'a'}, appendCommand(nil, "PING", []byte{0, 0})), wantErr: ErrFlags},
		{name: "empty command", in: []byte{flagCommand, 0}, wantErr: ErrMalformed},
		{name: "command name too long", in: []byte{flagCommand, 2, 5, 'x'}, wantErr: ErrMalformed},
		{name: "truncated header", in: []byte{flagLong, 0, 0}, wantErr: io.ErrUnexpectedEOF},
		{name: "truncated body", in: []byte{0, 10, 'a', 'b'}, wantErr: io.ErrUnexpectedEOF},
		{name: "truncated long body", in: cat(longHeader(0, 1<<20), make([]byte, 1000)), wantErr: io.ErrUnexpectedEOF},
		{name: "EOF after MORE", in: []byte{flagMore, 1, 'a'}, wantErr: io.ErrUnexpectedEOF},
		{name: "only flags", in: []byte{0}, wantErr: io.ErrUnexpectedEOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			max := tc.max
			if max == 0 {
				max = DefaultMaxMessageSize
			}
			fr := frameReader{r: bytes.NewReader(tc.in), max: max}
			var got [][][]byte
			for {
				msg, cmd, err := fr.next()
				if err != nil {
					if !errors.Is(err, tc.wantErr) {
						t.Fatalf("err = %v, want %v", err, tc.wantErr)
					}
					break
				}
				if cmd != nil {
					if cmd.name != tc.wantCmd || tc.wantErr != nil {
						t.Fatalf("command %q, want %q", cmd.name, tc.wantCmd)
					}
					break
				}
				got = append(got, msg)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Fatalf("messages (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReadReady(t *testing.T) {
	ready := func(props ...property) []byte { return appendReady(nil, props...) }
	for _, tc := range []struct {
		name    string
		self    string
		in      []byte
		wantID  string
		wantErr error
	}{
		{"SUB to PUB", "PUB", ready(property{"Socket-Type", []byte("SUB")}), "", nil},
		{"XSUB to PUB", "PUB", ready(property{"Socket-Type", []byte("XSUB")}), "", nil},
		{"lower-case name", "SUB", ready(property{"socket-type", []byte("PUB")}), "", nil},
		{"DEALER with identity", "ROUTER", ready(property{"Socket-Type", []byte("DEALER")}, property{"Identity", []byte("gw-1")}), "gw-1", nil},
		{"REQ to ROUTER", "ROUTER", ready(property{"Socket-Type", []byte("REQ")}), "", nil},
		{"ROUTER to ROUTER", "ROUTER", ready(property{"Socket-Type", []byte("ROUTER")}), "", nil},
		{"REP to DEALER", "DEALER", ready(property{"Socket-Type", []byte("REP")}), "", nil},
		{"PUB to PUB", "PUB", ready(property{"Socket-Type", []byte("PUB")}), "", ErrSocketType},
		{"SUB to ROUTER", "ROUTER", ready(property{"Socket-Type", []byte("SUB")}), "", ErrSocketType},
		{"DEALER to SUB", "SUB", ready(property{"Socket-Type", []byte("DEALER")}), "", ErrSocketType},
		{"no socket type", "PUB", ready(), "", ErrSocketType},
		{"value overruns", "PUB", appendCommand(nil, "READY", []byte{11, 'S', 'o', 'c', 'k', 'e', 't', '-', 'T', 'y', 'p', 'e', 0, 0, 0, 9, 'S'}), "", ErrMalformed},
		{"message instead", "PUB", appendMessage(nil, [][]byte{[]byte("hi")}), "", ErrMalformed},
		{"HELLO instead", "PUB", appendCommand(nil, "HELLO", nil), "", ErrMalformed},
		{"ERROR", "PUB", appendError(nil, "go away"), "", nil},
		{"nothing", "PUB", nil, "", io.ErrUnexpectedEOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			info, err := readReady(&frameReader{r: bytes.NewReader(tc.in), max: 1 << 20}, tc.self)
			if tc.name == "ERROR" {
				if err == nil || !bytes.Contains([]byte(err.Error()), []byte("go away")) {
					t.Fatalf("err = %v, want the peer's reason", err)
				}
				return
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if string(info.identity) != tc.wantID {
				t.Fatalf("identity %q, want %q", info.identity, tc.wantID)
			}
		})
	}
}

func TestParseEndpoint(t *testing.T) {
	for _, tc := range []struct {
		in   string
		bind bool
		want string
		ok   bool
	}{
		{"tcp://*:5557", true, ":5557", true},
		{"tcp://127.0.0.1:0", true, "127.0.0.1:0", true},
		{"tcp://[::1]:5557", false, "[::1]:5557", true},
		{"tcp://localhost:5557", false, "localhost:5557", true},
		{"tcp://*:5557", false, "", false},
		{"tcp://127.0.0.1:0", false, "", false},
		{"ipc:///tmp/x", true, "", false},
		{"inproc://x", false, "", false},
		{"tcp://nohost", true, "", false},
	} {
		got, err := parseEndpoint(tc.in, tc.bind)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseEndpoint(%q, %v) = %q, %v", tc.in, tc.bind, got, err)
		}
	}
}

// FuzzReadFrames feeds arbitrary bytes to the greeting, READY and frame
// parsers as a peer would send them: they must never panic, and never
// return a message larger than the maximum.
func FuzzReadFrames(f *testing.F) {
	hello := cat(appendGreeting(nil, 1), appendReady(nil, property{"Socket-Type", []byte("DEALER")}, property{"Identity", []byte("id")}))
	f.Add(hello)
	f.Add(cat(appendGreeting(nil, 0), appendReady(nil, property{"Socket-Type", []byte("SUB")}), appendMessage(nil, [][]byte{{1, 'k', 'v'}})))
	f.Add(cat(hello, appendMessage(nil, [][]byte{[]byte("kv"), make([]byte, 8), bytes.Repeat([]byte{0x93}, 300)})))
	f.Add(cat(hello, appendCommand(nil, "SUBSCRIBE", []byte("kv")), appendCommand(nil, "PING", []byte{0, 10, 'c'})))
	f.Add(cat(hello, longHeader(0, 1<<62)))
	f.Add(cat(hello, appendError(nil, "bad")))
	f.Add(cat(hello, appendReady(nil, property{"Socket-Type", []byte("SUB")}, property{"X-Long", bytes.Repeat([]byte{'v'}, 300)}, property{"x-long", nil})))
	f.Fuzz(func(t *testing.T, data []byte) {
		const max = 4096
		r := bytes.NewReader(data)
		if _, err := readGreeting(r); err != nil {
			return
		}
		// Each role reads the READY afresh: a ROUTER refusing a SUB's READY
		// has consumed it, and the PUB must see it, not the frame after.
		afterGreeting := data[len(data)-r.Len():]
		var fr *frameReader
		for _, self := range []string{"ROUTER", "PUB"} {
			fr = &frameReader{r: bytes.NewReader(afterGreeting), max: max}
			if _, err := readReady(fr, self); err == nil {
				break
			}
		}
		for {
			msg, cmd, err := fr.next()
			if err != nil {
				return
			}
			var n int
			for _, f := range msg {
				n += len(f) + frameCost
			}
			if n > max {
				t.Fatalf("message of %d bytes passed a maximum of %d", n, max)
			}
			if cmd != nil {
				// A command writes back as the same command.
				_, back, err := (&frameReader{r: bytes.NewReader(appendCommand(nil, cmd.name, cmd.data)), max: max}).next()
				if err != nil || back == nil || back.name != cmd.name || !bytes.Equal(back.data, cmd.data) {
					t.Fatalf("command %q %q written back and read as %+v, %v", cmd.name, cmd.data, back, err)
				}
				// Properties that parse write back as the same properties
				// (names in their canonical lower case).
				if props, err := parseProperties(cmd.data); err == nil {
					var list []property
					for name, value := range props {
						list = append(list, property{name, value})
					}
					_, ready, err := (&frameReader{r: bytes.NewReader(appendReady(nil, list...)), max: 1 << 20}).next()
					if err != nil {
						t.Fatalf("properties %q written back do not read: %v", props, err)
					}
					again, err := parseProperties(ready.data)
					if err != nil || len(again) != len(props) {
						t.Fatalf("properties %q written back and read as %q, %v", props, again, err)
					}
					for name, value := range props {
						if !bytes.Equal(again[name], value) {
							t.Fatalf("property %q = %q written back and read as %q", name, value, again[name])
						}
					}
				}
				if reason := parseError(cmd.data); len(reason) > 255 || !bytes.HasPrefix(cmd.data[min(1, len(cmd.data)):], []byte(reason)) {
					t.Fatalf("ERROR data %q gives the reason %q", cmd.data, reason)
				}
				continue
			}
			// What was read writes back as the same message: frames and
			// their boundaries survive a round trip through the encoder.
			again, _, err := (&frameReader{r: bytes.NewReader(appendMessage(nil, msg)), max: max}).next()
			if err != nil || len(again) != len(msg) {
				t.Fatalf("message of %d frames written back and read as %d frames, %v", len(msg), len(again), err)
			}
			for i := range msg {
				if !bytes.Equal(again[i], msg[i]) {
					t.Fatalf("frame %d written back and read as %q, want %q", i, again[i], msg[i])
				}
			}
		}
	})
}
