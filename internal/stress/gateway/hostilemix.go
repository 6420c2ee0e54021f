package gateway

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// hostileShares are the kinds of hostile requests, their share of them
// per 3,000, and the builder of each kind's variants.
var hostileShares = []struct {
	kind  string
	share int
	build func(*hostileBuilder) []hostileReq
}{
	{"malformed-json", 460, (*hostileBuilder).malformedJSON},
	{"huge-json", 60, (*hostileBuilder).hugeJSON},
	{"nested-json", 100, (*hostileBuilder).nestedJSON},
	{"wrong-method", 300, (*hostileBuilder).wrongMethod},
	{"odd-path", 400, (*hostileBuilder).oddPath},
	{"content-type", 300, (*hostileBuilder).contentType},
	{"invalid-utf8", 250, (*hostileBuilder).invalidUTF8},
	{"absurd-headers", 400, (*hostileBuilder).absurdHeaders},
	{"cut-body", 300, (*hostileBuilder).cutBody},
	{"garbage", 200, (*hostileBuilder).garbage},
	{"h2-garbage", 100, (*hostileBuilder).h2Garbage},
	{"stalled-body", 40, (*hostileBuilder).stalledBody},
	{"slowloris", 60, (*hostileBuilder).slowloris},
	{"idle-conn", 10, (*hostileBuilder).idleConn},
	{"slow-complete", 20, (*hostileBuilder).slowComplete},
}

// hostileMix builds the shuffled list of exchanges: the hostile kinds in
// their shares, and the valid chats (a tenth over keep-alive net/http, a
// tenth over h2c, the rest raw).
func hostileMix(l HostileLoad, addr string) []hostileReq {
	b := &hostileBuilder{host: addr, l: l}
	var reqs []hostileReq
	counts := make([]int, len(hostileShares))
	assigned := 0
	for i, s := range hostileShares {
		counts[i] = max(1, s.share*l.Hostile/3000)
		assigned += counts[i]
	}
	counts[0] = max(1, counts[0]+l.Hostile-assigned)
	for i, s := range hostileShares {
		variants := s.build(b)
		for n := range counts[i] {
			q := variants[n%len(variants)]
			q.kind = s.kind
			if q.wait == 0 {
				q.wait = l.RequestTimeout + 5*time.Second
			}
			reqs = append(reqs, q)
		}
	}
	for n := range l.Valid {
		q := b.valid()
		switch n % 10 {
		case 0:
			q.keepAlive = true
		case 1:
			q.h2c = true
		}
		reqs = append(reqs, q)
	}
	rng := rand.New(rand.NewPCG(l.Seed, 11))
	rng.Shuffle(len(reqs), func(i, j int) { reqs[i], reqs[j] = reqs[j], reqs[i] })
	return reqs
}

// hostileBuilder writes the raw requests.
type hostileBuilder struct {
	host string
	l    HostileLoad
}

const hostileChat = `{"model":"sim","messages":[{"role":"user","content":"Hello there, gateway."}],"max_tokens":4}`

// request writes a request with a Content-Length body; headers are whole
// lines without CRLF. Every request asks to close the connection.
func (b *hostileBuilder) request(method, target string, body []byte, headers ...string) []byte {
	var w bytes.Buffer
	fmt.Fprintf(&w, "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n", method, target, b.host)
	for _, h := range headers {
		w.WriteString(h + "\r\n")
	}
	if body != nil {
		fmt.Fprintf(&w, "Content-Length: %d\r\n", len(body))
	}
	w.WriteString("\r\n")
	w.Write(body)
	return w.Bytes()
}

func (b *hostileBuilder) post(variant, target, contentType string, body []byte, headers ...string) hostileReq {
	if contentType != "" {
		headers = append([]string{"Content-Type: " + contentType}, headers...)
	}
	return hostileReq{variant: variant, parts: [][]byte{b.request(http.MethodPost, target, body, headers...)}}
}

func (b *hostileBuilder) chat(variant string, body []byte, headers ...string) hostileReq {
	return b.post(variant, "/v1/chat/completions", "application/json", body, headers...)
}

func (b *hostileBuilder) raw(variant string, data []byte, closeWrite bool) hostileReq {
	return hostileReq{variant: variant, parts: [][]byte{data}, closeWrite: closeWrite}
}

// valid is a valid chat.
func (b *hostileBuilder) valid() hostileReq {
	q := b.chat("valid", []byte(hostileChat))
	q.kind, q.valid, q.wait = "valid", true, b.l.RequestTimeout+5*time.Second
	return q
}

// bigBodies are the large bodies of huge-json, built once per process.
var bigBodies = sync.OnceValue(func() map[string][]byte {
	var keys strings.Builder
	for i := range 50000 {
		if i > 0 {
			keys.WriteByte(',')
		}
		keys.WriteString(`"k` + strconv.Itoa(i) + `":` + strconv.Itoa(i))
	}
	padded := []byte(`{"model":"sim","messages":[{"role":"user","content":"hi"}],"max_tokens":4`)
	padded = append(append(padded, bytes.Repeat([]byte(" "), 30<<20)...), '}')
	return map[string][]byte{
		"long":   []byte(`{"model":"sim","messages":[{"role":"user","content":"` + strings.Repeat("tokens ", 600<<10) + `"}],"max_tokens":4}`),
		"array":  chatWith(`"x":[` + strings.Repeat("0,", 200000) + `0]`),
		"keys":   chatWith(`"metadata":{` + keys.String() + `}`),
		"padded": padded,
	}
})

func chatWith(extra string) []byte {
	return []byte(`{"model":"sim","messages":[{"role":"user","content":"hi"}],"max_tokens":4,` + extra + `}`)
}

// malformedJSON is malformed-json: bodies that are not JSON, or not the JSON of a chat.
func (b *hostileBuilder) malformedJSON() []hostileReq {
	var out []hostileReq
	for i, body := range []string{
		`{`, `{"model":"sim","messages":[`, `nul`, `{"model":"sim",}`, `{"messages":[{"role":"user","content":"hi"}]}}`,
		"\x00\x01\x02", `{"model":1e999999}`, ``, `[]`, `"just a string"`, `{"model":"sim","messages":"not a list"}`,
		`{"model":"sim","messages":[{"role":"user","content":"hi"}],"max_tokens":-1}`,
		`{"model":"sim","messages":[{"role":"user","content":"hi"}],"max_tokens":1e100}`,
		`{"model":"no-such-model","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"sim","model":"inferrail/sim-8b","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`,
		`{"model":["sim"],"messages":[]}`, `{"model":"sim","messages":[{"role":"user"}]}`, `{"model":"sim","prompt":"hi"}`,
		`{"model":"sim","messages":[{"role":"user","content":"hi"}],"stream_options":{"include_usage":true}}`,
		`{"model":"sim","messages":[{"role":"user","content":"hi"}],"n":5}`, `{"model":"sim","messages":[]}`,
		`{"model":null,"messages":[{"role":"user","content":"hi"}],"max_tokens":2}`, `{"model":"sim"} {"model":"sim"}`,
	} {
		out = append(out, b.chat(fmt.Sprintf("malformed-%d %.30q", i, body), []byte(body)))
	}
	return out
}

// hugeJSON is huge-json: bodies of megabytes: a long prompt, wide arrays and objects, a body past the limit.
func (b *hostileBuilder) hugeJSON() []hostileReq {
	big := bigBodies()
	long, array, keys, padded := big["long"], big["array"], big["keys"], big["padded"]
	tooBig := b.request(http.MethodPost, "/v1/chat/completions", nil, "Content-Type: application/json", "Content-Length: 41943040")
	return []hostileReq{
		b.chat("4 MiB prompt", long), b.chat("200k-element array", array), b.chat("50k-key object", keys),
		b.chat("200k-element array", array), b.chat("50k-key object", keys), b.chat("4 MiB prompt", long),
		b.chat("200k-element array", array), b.chat("50k-key object", keys), b.chat("4 MiB prompt", long),
		{variant: "40 MiB declared, 1 MiB sent", parts: [][]byte{tooBig, bytes.Repeat([]byte(" "), 1<<20)}},
		b.chat("30 MiB padded body (under the 32 MiB limit)", padded),
		{variant: "40 MiB declared, 1 MiB sent", parts: [][]byte{tooBig, bytes.Repeat([]byte(" "), 1<<20)}},
	}
}

// nestedJSON is nested-json: JSON nested deep enough to exhaust a recursive parser.
func (b *hostileBuilder) nestedJSON() []hostileReq {
	deep := func(n int, open, close string) string { return strings.Repeat(open, n) + strings.Repeat(close, n) }
	return []hostileReq{
		b.chat("arrays 100000 deep", chatWith(`"x":`+deep(100000, "[", "]"))),
		b.chat("arrays 9000 deep", chatWith(`"x":`+deep(9000, "[", "]"))),
		b.chat("objects 9000 deep", chatWith(`"x":`+strings.Repeat(`{"a":`, 9000)+"1"+strings.Repeat("}", 9000))),
		b.chat("arrays 300 deep", chatWith(`"x":`+deep(300, "[", "]"))),
		b.chat("messages 100000 deep", []byte(`{"model":"sim","messages":`+deep(100000, "[", "]")+`}`)),
		b.chat("model 100000 deep", []byte(`{"model":`+deep(100000, "[", "]")+`}`)),
	}
}

// wrongMethod is wrong-method: methods the routes do not take.
func (b *hostileBuilder) wrongMethod() []hostileReq {
	var out []hostileReq
	for _, m := range []string{"GET", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "FOO", "get", "HEAD"} {
		for _, p := range []string{"/v1/chat/completions", "/v1/completions"} {
			out = append(out, hostileReq{variant: m + " " + p, method: m, parts: [][]byte{b.request(m, p, []byte(hostileChat), "Content-Type: application/json")}})
		}
	}
	for _, mp := range [][2]string{{"POST", "/v1/models"}, {"POST", "/health"}, {"DELETE", "/v1/models"}, {"PUT", "/health"}} {
		out = append(out, hostileReq{variant: mp[0] + " " + mp[1], method: mp[0], parts: [][]byte{b.request(mp[0], mp[1], []byte(hostileChat), "Content-Type: application/json")}})
	}
	return out
}

// oddPath is odd-path: paths that are not quite the API's.
func (b *hostileBuilder) oddPath() []hostileReq {
	var out []hostileReq
	for _, p := range []string{
		"/v1/chat/completions/", "//v1/chat/completions", "/v1/../v1/chat/completions", "/V1/CHAT/COMPLETIONS",
		"/v1/chat%2Fcompletions", "/%00", "/v1/chat/completions?stream=true&%zz", "/" + strings.Repeat("a", 6000), "*",
		"http://example.com/v1/chat/completions", "/v1/chat/completions#frag", "/\xff\xfe", "/v1/chat/completions%00",
		"/./v1/./chat/completions", "/v1/chat/completions;x=1", "/metrics", "/admin", "/v1", "/v2/chat/completions",
		"/v1/chat/completions?" + strings.Repeat("q=1&", 2000),
	} {
		out = append(out, b.post(fmt.Sprintf("path %.40q", p), p, "application/json", []byte(hostileChat)))
	}
	return out
}

// contentType is content-type: content types other than JSON.
func (b *hostileBuilder) contentType() []hostileReq {
	var out []hostileReq
	for _, ct := range []string{"text/plain", "", "multipart/form-data; boundary=x", "application/json; charset=utf-16",
		"application/x-www-form-urlencoded", "application/JSON", "*/*", "application/json; " + strings.Repeat("x=y; ", 60),
		"application/json\x01", "image/png"} {
		out = append(out, b.post(fmt.Sprintf("content type %.30q", ct), "/v1/chat/completions", ct, []byte(hostileChat)))
	}
	return out
}

// invalidUTF8 is invalid-utf8: invalid UTF-8 in the body and the headers.
func (b *hostileBuilder) invalidUTF8() []hostileReq {
	return []hostileReq{
		b.chat("invalid UTF-8 in content", []byte("{\"model\":\"sim\",\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\xc3\x28 bad\"}],\"max_tokens\":4}")),
		b.chat("invalid UTF-8 model", []byte("{\"model\":\"\xff\xfe\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":4}")),
		b.chat("invalid UTF-8 role", []byte("{\"model\":\"sim\",\"messages\":[{\"role\":\"\xc0\xaf\",\"content\":\"hi\"}],\"max_tokens\":4}")),
		b.chat("lone surrogate escape", []byte(`{"model":"sim","messages":[{"role":"user","content":"\ud800 hi"}],"max_tokens":4}`)),
		b.chat("invalid UTF-8 key", []byte("{\"model\":\"sim\",\"\xff\":1,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":4}")),
		b.chat("invalid UTF-8 request id", []byte(hostileChat), "X-Request-Id: \xff\xfe\xfd"),
		b.chat("invalid UTF-8 header value", []byte(hostileChat), "X-Anything: \xc3\x28\xa0\xa1"),
		b.chat("NUL in content", []byte(`{"model":"sim","messages":[{"role":"user","content":"a\u0000b"}],"max_tokens":4}`)),
	}
}

// absurdHeaders is absurd-headers: header sections HTTP/1.1 forbids or that are merely absurd.
func (b *hostileBuilder) absurdHeaders() []hostileReq {
	var many []string
	for i := range 300 {
		many = append(many, fmt.Sprintf("X-Pad-%d: %s", i, strings.Repeat("a", 1000)))
	}
	body := []byte(hostileChat)
	return []hostileReq{
		b.chat("300 headers of 1 KB", body, many...),
		b.chat("one 900 KiB header", body, "X-Big: "+strings.Repeat("b", 900<<10)),
		b.chat("one 2 MiB header", body, "X-Huge: "+strings.Repeat("c", 2<<20)),
		b.raw("header without colon", []byte("POST /v1/chat/completions HTTP/1.1\r\nHost: "+b.host+"\r\nNoColonHere\r\nContent-Length: 2\r\n\r\n{}"), true),
		b.raw("two different Content-Length", []byte("POST /v1/chat/completions HTTP/1.1\r\nHost: "+b.host+"\r\nContent-Type: application/json\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}"), true),
		b.raw("negative Content-Length", []byte("POST /v1/chat/completions HTTP/1.1\r\nHost: "+b.host+"\r\nContent-Length: -5\r\n\r\n{}"), true),
		b.raw("Content-Length past int64", []byte("POST /v1/chat/completions HTTP/1.1\r\nHost: "+b.host+"\r\nContent-Length: 99999999999999999999\r\n\r\n{}"), true),
		{variant: "Transfer-Encoding gzip, chunked", expect5xx: http.StatusNotImplemented, closeWrite: true,
			parts: [][]byte{[]byte("POST /v1/chat/completions HTTP/1.1\r\nHost: " + b.host + "\r\nTransfer-Encoding: gzip, chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n")}},
		b.raw("chunked and Content-Length", []byte("POST /v1/chat/completions HTTP/1.1\r\nHost: "+b.host+"\r\nContent-Type: application/json\r\nConnection: close\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n"+fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(hostileChat), hostileChat)), true),
		b.raw("no Host", []byte("POST /v1/chat/completions HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: "+strconv.Itoa(len(hostileChat))+"\r\n\r\n"+hostileChat), true),
		b.chat("two Host headers", body, "Host: other.example"),
		b.chat("5000-byte request id", body, "X-Request-Id: "+strings.Repeat("r", 5000)),
		b.chat("Connection naming Content-Type", body, "Connection: keep-alive, Content-Type, X-Inferrail-Replica"),
		b.chat("h2c upgrade", body, "Upgrade: h2c", "HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA", "Connection: Upgrade, HTTP2-Settings"),
		{variant: "Expect 100-continue, 100 MiB declared", parts: [][]byte{b.request(http.MethodPost, "/v1/chat/completions", nil,
			"Content-Type: application/json", "Expect: 100-continue", "Content-Length: 104857600")}},
		b.chat("Expect 100-continue with its body", body, "Expect: 100-continue"),
		b.chat("Expect something else", body, "Expect: teapot"),
		{variant: "HTTP/9.9", expect5xx: http.StatusHTTPVersionNotSupported, closeWrite: true,
			parts: [][]byte{[]byte("POST /v1/chat/completions HTTP/9.9\r\nHost: " + b.host + "\r\nContent-Length: 2\r\n\r\n{}")}},
		b.raw("HTTP/1.0 without Host", []byte("POST /v1/chat/completions HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: "+strconv.Itoa(len(hostileChat))+"\r\n\r\n"+hostileChat), false),
		b.raw("obsolete line folding", []byte("POST /v1/chat/completions HTTP/1.1\r\nHost: "+b.host+"\r\nX-Folded: a\r\n  b\r\nContent-Length: 2\r\n\r\n{}"), true),
		b.raw("extra spaces in the request line", []byte("POST  /v1/chat/completions  HTTP/1.1\r\nHost: "+b.host+"\r\nContent-Length: 2\r\n\r\n{}"), true),
		b.chat("header name with a space", body, "X Bad: 1"),
		b.chat("Content-Encoding gzip on plain JSON", body, "Content-Encoding: gzip"),
	}
}

// cutBody is cut-body: bodies that end before their declared length.
func (b *hostileBuilder) cutBody() []hostileReq {
	half := []byte(hostileChat)[:len(hostileChat)/2]
	return []hostileReq{
		{variant: "Content-Length body cut in half", closeWrite: true, parts: [][]byte{b.request(http.MethodPost, "/v1/chat/completions", nil,
			"Content-Type: application/json", "Content-Length: "+strconv.Itoa(len(hostileChat))), half}},
		{variant: "chunk cut short", closeWrite: true, parts: [][]byte{[]byte("POST /v1/chat/completions HTTP/1.1\r\nHost: " + b.host +
			"\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n100\r\n" + string(half))}},
		{variant: "bad chunk size", closeWrite: true, parts: [][]byte{[]byte("POST /v1/chat/completions HTTP/1.1\r\nHost: " + b.host +
			"\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n")}},
		{variant: "Content-Length shorter than the body", closeWrite: true, parts: [][]byte{b.request(http.MethodPost, "/v1/chat/completions", nil,
			"Content-Type: application/json", "Content-Length: 10"), []byte(hostileChat)}},
		{variant: "headers only, body never sent", closeWrite: true, parts: [][]byte{b.request(http.MethodPost, "/v1/chat/completions", nil,
			"Content-Type: application/json", "Content-Length: 500")}},
		{variant: "request line only", closeWrite: true, parts: [][]byte{[]byte("POST /v1/chat/completions HTTP/1.1\r\n")}},
	}
}

// garbage is garbage: bytes that are not HTTP at all.
func (b *hostileBuilder) garbage() []hostileReq {
	rng := rand.New(rand.NewPCG(3, 4))
	junk := make([]byte, 512)
	for i := range junk {
		junk[i] = byte(rng.UintN(256))
	}
	return []hostileReq{
		b.raw("512 random bytes", append(junk, "\r\n\r\n"...), true),
		b.raw("TLS ClientHello", append([]byte("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"), junk[:200]...), true),
		b.raw("blank lines", []byte("\r\n\r\n\r\n"), true),
		b.raw("NUL bytes", bytes.Repeat([]byte{0}, 300), true),
		b.raw("SSH banner", []byte("SSH-2.0-OpenSSH_9.6\r\n\r\n"), true),
		b.raw("request line without version", []byte("POST /v1/chat/completions\r\n\r\n"), true),
	}
}

// h2Garbage is h2-garbage: HTTP/2 frames, broken ones among them, on the HTTP/1.1 port.
func (b *hostileBuilder) h2Garbage() []hostileReq {
	preface := "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
	settings := "\x00\x00\x00\x04\x00\x00\x00\x00\x00"
	return []hostileReq{
		b.raw("h2 preface, SETTINGS, garbage frame", []byte(preface+settings+"\x00\x00\x05\xff\x00\x00\x00\x00\x01hello"), true),
		b.raw("h2 preface, HEADERS with bad HPACK", []byte(preface+settings+"\x00\x00\x04\x01\x05\x00\x00\x00\x01\xff\xff\xff\xff"), true),
		b.raw("h2 preface only", []byte(preface), true),
		b.raw("h2 preface, 100 KiB DATA on stream 0", append([]byte(preface+settings+"\x01\x90\x00\x00\x00\x00\x00\x00\x00"), make([]byte, 100<<10)...), true),
	}
}

// stalledBody is stalled-body: a body that stops half-way and stays open.
func (b *hostileBuilder) stalledBody() []hostileReq {
	head := b.request(http.MethodPost, "/v1/chat/completions", nil, "Content-Type: application/json", "Content-Length: "+strconv.Itoa(len(hostileChat)))
	return []hostileReq{{variant: "body stops half-way", slow: true, wait: b.l.RequestTimeout + 5*time.Second,
		parts: [][]byte{head, []byte(hostileChat)[:len(hostileChat)/2]}}}
}

// slowloris is slowloris: headers dribbled a byte at a time, never finished.
func (b *hostileBuilder) slowloris() []hostileReq {
	header := b.l.HeaderTimeout
	return []hostileReq{
		{variant: "a header byte every 500 ms", slow: true, wait: header + 5*time.Second, drip: 500 * time.Millisecond,
			parts: [][]byte{[]byte("POST /v1/chat/completions HTTP/1.1\r\nHost: " + b.host + "\r\nX-Slow: ")}},
		{variant: "request line, then a byte every 200 ms", slow: true, wait: header + 5*time.Second, drip: 200 * time.Millisecond,
			parts: [][]byte{[]byte("POST /v1/chat/completions HTTP/1.1\r\n")}},
	}
}

// idleConn is idle-conn: a connection that sends nothing.
func (b *hostileBuilder) idleConn() []hostileReq {
	header := b.l.HeaderTimeout
	return []hostileReq{{variant: "connect and send nothing", slow: true, wait: header + 5*time.Second}}
}

// slowComplete is slow-complete: a whole valid request dribbled out within the header timeout.
func (b *hostileBuilder) slowComplete() []hostileReq {
	header := b.l.HeaderTimeout
	// A whole valid request, dribbled out within the header timeout.
	full := b.request(http.MethodPost, "/v1/chat/completions", []byte(hostileChat), "Content-Type: application/json")
	var parts [][]byte
	for i := 0; i < len(full); i += 20 {
		parts = append(parts, full[i:min(i+20, len(full))])
	}
	return []hostileReq{{variant: "valid request in 20-byte pieces within half the header timeout", slow: true, parts: parts,
		pause: header / time.Duration(2*len(parts)), wait: b.l.RequestTimeout + 5*time.Second, valid: true}}
}
