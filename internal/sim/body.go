package sim

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/inferrail/inferrail/internal/openai"
	"github.com/inferrail/inferrail/internal/tokenize"
	"github.com/inferrail/inferrail/internal/tokenize/simtok"
)

// maxBody bounds request bodies; vLLM has no limit of its own, but a
// simulator on a shared machine should not buffer without end.
const maxBody = 64 << 20

// bigBody is the size above which a body is parsed and tokenized only while
// no other such body is. Parsing holds a few copies of a body's text at
// once, so several large bodies side by side would take gigabytes; vLLM's
// API server tokenizes on one event loop too, one request after another.
const bigBody = 4 << 20

// readJSONBody checks the content type and reads the body, as vLLM's
// validate_json_request does first.
func readJSONBody(w http.ResponseWriter, r *http.Request) ([]byte, *openai.Error) {
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if strings.ToLower(mt) != "application/json" {
		return nil, &openai.Error{Status: http.StatusBadRequest, Type: "Bad Request",
			Message: "1 validation error:\n  Unsupported Media Type: Only 'application/json' is allowed"}
	}
	body := http.MaxBytesReader(w, r.Body, maxBody)
	var buf bytes.Buffer
	// A large body takes one allocation of its announced size rather than
	// doublings, but only once its first megabyte has come: a client that
	// announces 64 MiB and sends nothing must not cost them.
	const first = 1 << 20
	_, err := buf.ReadFrom(io.LimitReader(body, first))
	if err == nil && buf.Len() == first {
		if r.ContentLength > first {
			buf.Grow(int(min(r.ContentLength, maxBody)) - first + bytes.MinRead)
		}
		_, err = buf.ReadFrom(body)
	}
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, openai.HTTPError(http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over %d bytes", maxBody))
		}
		return nil, openai.HTTPError(http.StatusBadRequest, "reading the request body: "+err.Error())
	}
	if !utf8.Valid(buf.Bytes()) {
		// Python decodes the body before parsing it; FastAPI answers the
		// UnicodeDecodeError so.
		return nil, openai.HTTPError(http.StatusBadRequest, bodyUnparsable)
	}
	// Python's json.loads of bytes skips UTF-8's byte order mark.
	return bytes.TrimPrefix(buf.Bytes(), []byte("\ufeff")), nil
}

// holdIfBig waits until no other large body is being parsed when body is
// large, and returns what ends the hold.
func (s *Server) holdIfBig(body []byte) (release func()) {
	if len(body) <= bigBody {
		return func() {}
	}
	s.bigBodies <- struct{}{}
	return func() { <-s.bigBodies }
}

// promptIDs returns the builtin:sim ids of p and their number, as
// simtok's PromptIDs computes them, but counts a text prompt first and
// builds no ids when it holds more than limit tokens: at eight bytes a
// token, the ids of a prompt too long to serve would take several times
// the memory of its text.
func promptIDs(tok *simtok.Tokenizer, p *tokenize.Prompt, limit int) ([]int, int) {
	if p.HasIDs {
		ids := tok.PromptIDs(p)
		return ids, len(ids)
	}
	text := p.Text
	if p.Chat != nil {
		text = simtok.RenderChat(p.Chat)
	}
	var ids []int
	if p.AddSpecial {
		ids = append(ids, tok.BOS())
	}
	// Every token covers a byte at least: a text no longer than the limit
	// needs no count first, and is tokenized once.
	if len(ids)+len(text) > limit {
		if n := len(ids) + tok.Count(text); n > limit {
			return nil, n
		}
	}
	ids = tok.Encode(ids, text)
	return ids, len(ids)
}
