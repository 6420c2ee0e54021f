package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/inferrail/inferrail/internal/openai"
	"github.com/inferrail/inferrail/internal/pyjson"
)

var utf8BOM = []byte("\uFEFF")

// readBody reads the whole body within the deadline and the size limit.
func (g *Gateway) readBody(w http.ResponseWriter, r *http.Request, deadline time.Time) ([]byte, error) {
	limit := g.cfg.Server.MaxBodyBytes
	if r.ContentLength > limit {
		skipBody(w, r) // refused unread: net/http would wait for it
		return nil, bodyTooLarge(limit)
	}
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(deadline)
	body, err := readAllSized(http.MaxBytesReader(w, r.Body, limit), r.ContentLength)
	if err != nil {
		// The deadline stays: clearing it after a timeout wedges the
		// connection, and the connection is closed after this answer.
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe):
			return nil, bodyTooLarge(limit)
		case errors.Is(err, os.ErrDeadlineExceeded):
			return nil, refusedBodyTimeout
		default:
			return nil, refusedBodyRead
		}
	}
	// Lift the deadline so a long response is not cut when it passes.
	_ = rc.SetReadDeadline(time.Time{})
	return body, nil
}

// How readAllSized sizes its buffer. A body of known length starts in a
// buffer of up to firstBodyBuffer and then grows at most bodyGrowth-fold at
// a time, to exactly its length: an 8 MiB body takes a 1 MiB buffer and
// then its own 8 MiB, 9 MiB in all, where doubling from 1 MiB (what
// bytes.Buffer does, with its slack for one more read past the end) took
// 1+2+4+8+16 MiB and held the last two at once. A client must still send an
// eighth of what it claims before the gateway allocates all of it, so a
// Content-Length alone reserves little. A body of unknown length (chunked)
// starts at 4 KiB and doubles. A full buffer grows only once a byte past it
// arrived, so a body that fills it exactly is not copied again.
const (
	firstBodyBuffer   = 1 << 20
	firstChunkedBytes = 4 << 10
	bodyGrowth        = 8
)

// readAllSized reads r to its end. size is the length r claims, or -1 when
// unknown; a reader that runs past its claim is read to its end all the
// same, the buffer then doubling.
func readAllSized(r io.Reader, size int64) ([]byte, error) {
	var buf []byte
	if size >= 0 {
		buf = make([]byte, 0, min(size, firstBodyBuffer))
	} else {
		buf = make([]byte, 0, firstChunkedBytes)
	}
	for {
		if len(buf) == cap(buf) {
			// Full: see whether the body ends here before growing.
			var probe [1]byte
			n, err := io.ReadFull(r, probe[:])
			if n == 0 {
				if errors.Is(err, io.EOF) {
					return buf, nil
				}
				return nil, err
			}
			if int64(len(buf)) >= size {
				size = -1 // more than claimed
			}
			buf = append(grown(buf, nextBodyCap(int64(cap(buf)), size)), probe[0])
			continue
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// nextBodyCap is the buffer that follows a full one of capacity c for a
// body of size bytes (-1: unknown).
func nextBodyCap(c, size int64) int {
	if size < 0 {
		return int(max(2*c, firstChunkedBytes))
	}
	return int(min(size, max(bodyGrowth*c, firstChunkedBytes)))
}

// grown is buf copied into a new buffer of capacity c.
func grown(buf []byte, c int) []byte {
	out := make([]byte, len(buf), c)
	copy(out, buf)
	return out
}

// arrayPrompt is a completion's prompt tokens estimated from its prompt
// array (openai.ArrayPromptTokens): a token-id list counts its ids, a text
// its bytes over four. Body bytes over four would count a list of small
// ids at about half its tokens (two bytes an id), and a batch of such
// lists, which the tokenizer does not take, would keep that estimate. 0
// for a chat, or a prompt that is no array (or an empty one, which the
// engine refuses).
func arrayPrompt(r *http.Request, body []byte, mf openai.ModelField) int {
	if isChatPath(r.URL.Path) || mf.PromptEnd == 0 {
		return 0
	}
	n, _ := openai.ArrayPromptTokens(body[mf.PromptStart:mf.PromptEnd], bytesPerToken)
	return n
}

// readableBody is body as the gateway's own readers (FindModel, the prompt
// parsers), which read JSON as encoding/json does, can read it: body itself
// when it is JSON to them; else, when Python's json.loads (vLLM's reading)
// takes it only for its NaN, Infinity and -Infinity literals, which
// encoding/json refuses, a copy with each a zero of the same length
// (pyjson.ZeroNonFinite, zeroed true), so offsets into it are offsets into
// body. unreadable says a literal lies outside samplingMembers: the
// request then routes without a prediction. ok is false for a body that
// is not JSON to either: the gateway's usual 400, as Python would refuse
// it too. Engines get body, never the copy: its zeros are no values the
// client sent, and vLLM judges the literals itself (a float field takes
// them; an int or bool field, or a range check, refuses them).
func readableBody(body []byte) (readable []byte, zeroed, unreadable, ok bool) {
	if nestsDeeper(body, maxBodyDepth) {
		return nil, false, false, false
	}
	if json.Valid(body) {
		return body, false, false, true
	}
	readable, unreadable = pyjson.ZeroNonFinite(body, func(member []byte) bool { return samplingMembers[string(member)] })
	// What Python refuses about the literals (-NaN, NaNa) is left in the
	// copy, which encoding/json refuses then, as it refuses a body that is
	// malformed elsewhere.
	if readable == nil || !json.Valid(readable) {
		return nil, false, false, false
	}
	return readable, true, unreadable, true
}

// maxBodyDepth bounds how deeply a body may nest. Python's json.loads,
// and so vLLM, refuses a body nested about 990 levels deep (RecursionError)
// or more, and encoding/json's Valid recurses a level at a time: 2 MB of
// stack at 10,000 levels, kept by the request's goroutine while it waits.
const maxBodyDepth = 1000

// nestsDeeper reports whether the objects and arrays of body, read as
// JSON, nest more than limit deep, in one pass without recursion. A body
// that is not JSON may be taken either way; encoding/json judges it next.
func nestsDeeper(body []byte, limit int) bool {
	depth := 0
	for i := 0; i < len(body); i++ {
		switch body[i] {
		case '"':
			// To the closing quote, one not escaped by an odd run of
			// backslashes; IndexByte skips most of a body's bytes fast.
			for {
				j := bytes.IndexByte(body[i+1:], '"')
				if j < 0 {
					return false
				}
				i += 1 + j
				k := i - 1
				for body[k] == '\\' {
					k--
				}
				if (i-1-k)%2 == 0 {
					break
				}
			}
		case '{', '[':
			if depth++; depth > limit {
				return true
			}
		case '}', ']':
			depth--
		}
	}
	return false
}

// samplingMembers are the top-level members whose NaN or infinities leave
// the request's prediction as it is: sampling parameters, which shape no
// prompt and which vLLM range-checks itself. A literal anywhere else may
// lie where the prompt parsers or the limits read (messages, tools,
// max_tokens), whose zero stand-in would predict another prompt or cap.
var samplingMembers = map[string]bool{
	"temperature": true, "top_p": true, "top_k": true, "min_p": true, "presence_penalty": true,
	"frequency_penalty": true, "repetition_penalty": true, "length_penalty": true, "logit_bias": true,
}

// parseable is what the gateway's own readers read of the request: its
// body, or the copy readableBody set apart for a body with Python's
// literals.
func (ex *exchange) parseable() []byte {
	if ex.readable == nil {
		return ex.body
	}
	return ex.readable
}
