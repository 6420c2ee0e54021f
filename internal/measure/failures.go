package measure

import (
	"context"
	"errors"
	"fmt"
)

// Kinds of failed requests, the keys of the error_kinds maps in results.
const (
	KindTransport   = "transport"    // dial, write or read failed
	KindTimeout     = "timeout"      // the per-request timeout expired
	KindStatus      = "status"       // not 200
	KindContentType = "content_type" // not what vLLM sends
	KindSSE         = "sse"          // the event stream was malformed or cut
	KindJSON        = "json"         // a body or chunk was not the expected JSON
	KindErrorEvent  = "error_event"  // the stream carried an error object
	KindNoDone      = "no_done"      // the stream ended without data: [DONE]
	KindAfterDone   = "after_done"   // something followed data: [DONE]
	KindFinish      = "finish"       // no or a bad finish_reason
	KindUsage       = "usage"        // usage missing, unexpected or wrong
)

// RequestError is one failed request, classified by kind.
type RequestError struct {
	Kind string
	Err  error
}

func (e *RequestError) Error() string { return e.Kind + ": " + e.Err.Error() }
func (e *RequestError) Unwrap() error { return e.Err }

// Failf makes a RequestError of kind with a formatted message.
func Failf(kind, format string, args ...any) error {
	return &RequestError{Kind: kind, Err: fmt.Errorf(format, args...)}
}

// Classify turns an error from a request into a RequestError, telling the
// per-request timeout from other transport failures.
func Classify(ctx context.Context, err error) *RequestError {
	var le *RequestError
	if errors.As(err, &le) {
		return le
	}
	if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		return &RequestError{Kind: KindTimeout, Err: err}
	}
	return &RequestError{Kind: KindTransport, Err: err}
}

// MaxErrorSamples is how many error texts a result keeps as samples.
const MaxErrorSamples = 5
