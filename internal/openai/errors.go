package openai

import (
	"net/http"
	"strconv"
)

// Error is an error answer in the shape vLLM gives: {"error": {"message",
// "type", "param", "code"}}. Type is vLLM's exception name for errors it
// raises itself (BadRequestError, NotFoundError) and the HTTP phrase for
// framework errors ("Bad Request", "Method Not Allowed").
type Error struct {
	Status  int
	Type    string
	Message string
	Param   string // empty means null
}

func (e *Error) Error() string { return e.Message }

// BadRequest is a 400 naming the parameter at fault (empty for none).
func BadRequest(msg, param string) *Error {
	return &Error{Status: http.StatusBadRequest, Type: "BadRequestError", Message: msg, Param: param}
}

// NotFound is a 404 NotFoundError.
func NotFound(msg, param string) *Error {
	return &Error{Status: http.StatusNotFound, Type: "NotFoundError", Message: msg, Param: param}
}

// HTTPError is an error raised by the HTTP layer itself: its type is the
// status phrase.
func HTTPError(status int, msg string) *Error {
	return &Error{Status: status, Type: http.StatusText(status), Message: msg}
}

// ModelNotFound is vLLM's answer for a model it does not serve.
func ModelNotFound(model string) *Error {
	return NotFound("The model `"+model+"` does not exist.", "model")
}

// AppendJSON appends the error body as Starlette's JSONResponse writes it:
// compact, raw UTF-8.
func (e *Error) AppendJSON(dst []byte) []byte { return e.appendJSON(dst, &compactBody) }

// AppendStreamJSON appends the error as vLLM writes it inside an event
// stream: Python json.dumps with its default spaced separators and ASCII
// escapes.
func (e *Error) AppendStreamJSON(dst []byte) []byte { return e.appendJSON(dst, &spacedBody) }

// bodyFormat is one way of writing an error body: the text before each
// value and how strings are written.
type bodyFormat struct {
	message, typ, param, code string
	str                       func(dst []byte, s string) []byte
}

var (
	compactBody = bodyFormat{`{"error":{"message":`, `,"type":`, `,"param":`, `,"code":`, AppendString}
	spacedBody  = bodyFormat{`{"error": {"message": `, `, "type": `, `, "param": `, `, "code": `, AppendASCIIString}
)

func (e *Error) appendJSON(dst []byte, f *bodyFormat) []byte {
	dst = append(dst, f.message...)
	dst = f.str(dst, e.Message)
	dst = append(dst, f.typ...)
	dst = f.str(dst, e.Type)
	dst = append(dst, f.param...)
	if e.Param == "" {
		dst = append(dst, "null"...)
	} else {
		dst = f.str(dst, e.Param)
	}
	dst = append(dst, f.code...)
	dst = strconv.AppendInt(dst, int64(e.Status), 10)
	return append(dst, "}}"...)
}

// Write sends the error as a complete JSON response.
func (e *Error) Write(w http.ResponseWriter) {
	body := e.AppendJSON(nil)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(e.Status)
	_, _ = w.Write(body)
}
