package openai

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// SSEContentType is the content type vLLM streams with.
const SSEContentType = "text/event-stream; charset=utf-8"

// Done is the payload of the event that ends every vLLM stream.
var Done = []byte("[DONE]")

// AppendEvent frames data as one server-sent event, "data: " + data + "\n\n".
func AppendEvent(dst, data []byte) []byte {
	dst = append(dst, "data: "...)
	dst = append(dst, data...)
	return append(dst, '\n', '\n')
}

// ErrEventTooLarge is returned by SSEReader for an event over its limit.
var ErrEventTooLarge = errors.New("openai: event too large")

// SSEReader reads the data of server-sent events. It accepts LF and CRLF line
// ends, joins multi-line data with "\n", and ignores comments and
// fields other than data.
type SSEReader struct {
	r   *bufio.Reader
	max int
	buf []byte
}

// NewSSEReader reads events from r, none longer than max bytes (0 means
// 16 MiB).
func NewSSEReader(r io.Reader, max int) *SSEReader {
	if max <= 0 {
		max = 16 << 20
	}
	return &SSEReader{r: bufio.NewReaderSize(r, 4<<10), max: max}
}

// Next returns the data of the next event, valid until the next call. It
// returns io.EOF after the last complete event; a stream cut inside an event
// gives io.ErrUnexpectedEOF.
func (s *SSEReader) Next() ([]byte, error) {
	s.buf = s.buf[:0]
	hasData := false
	for {
		line, err := s.line()
		if err != nil {
			if errors.Is(err, io.EOF) && (hasData || len(line) > 0) {
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
		if len(line) == 0 {
			if hasData {
				return s.buf, nil
			}
			continue
		}
		if line[0] == ':' {
			continue
		}
		field, value, found := bytes.Cut(line, []byte{':'})
		if found && len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
		if string(field) != "data" {
			continue
		}
		if hasData {
			s.buf = append(s.buf, '\n')
		}
		if len(s.buf)+len(value) > s.max {
			return nil, ErrEventTooLarge
		}
		s.buf = append(s.buf, value...)
		hasData = true
	}
}

// line reads one line without its end, at most max bytes.
func (s *SSEReader) line() ([]byte, error) {
	var line []byte
	for {
		frag, err := s.r.ReadSlice('\n')
		line = append(line, frag...)
		if len(line) > s.max+2 {
			return nil, ErrEventTooLarge
		}
		if err == nil {
			break
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if len(line) > 0 && errors.Is(err, io.EOF) {
			return bytes.TrimRight(line, "\r"), io.EOF
		}
		return nil, err
	}
	line = line[:len(line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, nil
}

// EndsWithDone reports whether tail, the last bytes of an event stream,
// ends with the [DONE] event that ends every vLLM and SGLang stream: a
// "data: [DONE]" line (the space is optional, as for any field), then
// nothing but line ends and comment lines (a proxy between may send
// those to keep the connection alive). An engine's stream that ends
// cleanly without it was cut short.
func EndsWithDone(tail []byte) bool {
	b := bytes.TrimRight(tail, "\r\n")
	for {
		i := bytes.LastIndexAny(b, "\r\n")
		if i < 0 || b[i+1] != ':' {
			break
		}
		b = bytes.TrimRight(b[:i], "\r\n")
	}
	b, ok := bytes.CutSuffix(b, Done)
	if !ok {
		return false
	}
	b = bytes.TrimSuffix(b, []byte{' '})
	b, ok = bytes.CutSuffix(b, []byte("data:"))
	return ok && (len(b) == 0 || b[len(b)-1] == '\n' || b[len(b)-1] == '\r')
}

// DoneWatch follows an event stream written to it in pieces, split at any
// byte, and tells whether the stream so far ends with the [DONE] event as
// EndsWithDone tells of the whole stream: its last line that is neither
// blank nor a comment is "data: [DONE]" (or "data:[DONE]"). It keeps the
// first bytes of the line being written and one verdict, so however many
// comment lines follow [DONE] (keep-alives a proxy sends), and however
// long the stream, it costs the same memory and time linear in the bytes
// written. The zero value has seen nothing.
type DoneWatch struct {
	line [len("data: [DONE]") + 1]byte // the current line's first bytes
	n    int                           // of line, held
	done bool                          // the last finished line that counts was [DONE]'s
}

// Write adds p to the stream.
func (w *DoneWatch) Write(p []byte) {
	for len(p) > 0 {
		i := bytes.IndexAny(p, "\r\n")
		if i < 0 {
			w.n += copy(w.line[w.n:], p)
			return
		}
		w.n += copy(w.line[w.n:], p[:i])
		if w.counts() {
			w.done = w.isDone()
		}
		w.n = 0
		p = p[i+1:]
	}
}

// Done reports whether the stream so far ends with [DONE]; a last line
// still unfinished counts as it stands, as in EndsWithDone.
func (w *DoneWatch) Done() bool {
	if w.counts() {
		return w.isDone()
	}
	return w.done
}

// counts reports whether the current line is neither blank nor a comment.
func (w *DoneWatch) counts() bool { return w.n > 0 && w.line[0] != ':' }

// isDone reports whether the current line is [DONE]'s data line.
func (w *DoneWatch) isDone() bool {
	l := string(w.line[:w.n])
	return l == "data: [DONE]" || l == "data:[DONE]"
}
