package gateway

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/inferrail/inferrail/internal/openai"
)

// refusal is an answer the gateway gives itself instead of an engine's:
// what the client reads, an error body in vLLM's shape with its status, and
// the reason inferrail_request_errors_total counts it under.
type refusal struct {
	answer *openai.Error
	reason string
	header http.Header // headers the answer carries; nil for none
}

func newRefusal(e *openai.Error, reason string) *refusal { return &refusal{answer: e, reason: reason} }

func (r *refusal) Error() string { return r.answer.Message }

// Errors of the request path that end in the gateway's own answer; see
// refusalOf.
var (
	errNoReplica   = errors.New("no healthy replica serves the model")
	errFleetFull   = errors.New("every replica serving the model is at capacity")
	errReplicaDown = errors.New("replica failed its health checks while the request waited")
	errHeadTimeout = errors.New("no response head within the request timeout")
	// errSwitched: the engine answered by switching protocols, which no
	// route of the API does; the attempt failed.
	errSwitched = errors.New("engine answered 101 Switching Protocols")
	// errBadStatus: the engine's status is outside HTTP's 100-599 (RFC
	// 9110 §15), which no client can be given: below 100 net/http's
	// WriteHeader panics, and above 599 is no status class. The attempt
	// failed, as with errSwitched.
	errBadStatus = errors.New("engine answered a status outside 100-599")
)

// refusalOf turns an error of the request path into the answer the client
// gets: the one place where an error becomes a status. A *refusal answers
// as it is; no healthy replica or no room is 503, no response head in time
// 504, and any other failure to reach an engine 502.
func refusalOf(err error) *refusal {
	var r *refusal
	switch {
	case errors.As(err, &r):
		return r
	case errors.Is(err, errNoReplica):
		return newRefusal(openai.HTTPError(http.StatusServiceUnavailable, "No healthy replica serves the model."), reasonNoReplica)
	case errors.Is(err, errFleetFull):
		return newRefusal(openai.HTTPError(http.StatusServiceUnavailable, "Every replica serving the model is at capacity."), reasonFleetFull)
	case errors.Is(err, errHeadTimeout):
		return newRefusal(openai.HTTPError(http.StatusGatewayTimeout, "No replica answered within the request timeout."), reasonTimeout)
	default:
		return newRefusal(openai.HTTPError(http.StatusBadGateway, "No replica could take the request."), reasonUpstream)
	}
}

// skipBody keeps an answer given before the request's body is read from
// waiting for that body: after an HTTP/1 handler answers, net/http reads
// what is left of a body under 256 KiB before the answer leaves, bounded
// by no deadline of ours, so a client that sent headers and part of a
// body held its connection and got nothing. A read deadline a moment away
// bounds that: a body already sent is read at once and the connection
// kept (a deadline of now failed every read, so any body past the
// server's first buffer closed it), while the answer to a body that
// stalls leaves after skipBodyGrace, and the connection closes after it.
func skipBody(w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor == 1 && r.ContentLength != 0 {
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(skipBodyGrace))
	}
}

// skipBodyGrace is how long a refusal given before the body waits for the
// rest of it: enough for a body in flight on a LAN, little for an answer.
const skipBodyGrace = 100 * time.Millisecond

// write sends the refusal; a 503 tells the client when to try again.
func (r *refusal) write(w http.ResponseWriter) {
	if r.answer.Status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	for k, vs := range r.header {
		w.Header()[k] = vs
	}
	r.answer.Write(w)
}

// Refusals of a request's body and model, before anything is routed.
func bodyTooLarge(limit int64) *refusal {
	return newRefusal(openai.HTTPError(http.StatusRequestEntityTooLarge, fmt.Sprintf("The request body is larger than %d bytes.", limit)), reasonBodyTooLarge)
}

var (
	refusedBodyTimeout = newRefusal(openai.HTTPError(http.StatusRequestTimeout, "The request body did not arrive within the request timeout."), reasonBodyTimeout)
	refusedBodyRead    = newRefusal(openai.HTTPError(http.StatusBadRequest, "Reading the request body failed."), reasonBadRequest)
	refusedNotJSON     = newRefusal(openai.BadRequest("The request body is not valid JSON.", ""), reasonBadRequest)
	refusedNotUTF8     = newRefusal(openai.HTTPError(http.StatusBadRequest, "There was an error parsing the body"), reasonBadRequest)
	refusedNoModel     = newRefusal(openai.BadRequest("The request names no model and the gateway serves several.", "model"), reasonBadRequest)
	refusedNotFound    = newRefusal(openai.HTTPError(http.StatusNotFound, "Not Found"), reasonNotFound)
	refusedMethod      = newRefusal(openai.HTTPError(http.StatusMethodNotAllowed, "Method Not Allowed"), reasonMethod)
	// A request still queued when the gateway starts to shut down has
	// reached no engine: a 503 lets its client retry it elsewhere at once
	// rather than find its connection cut at the shutdown timeout.
	refusedShutdown = newRefusal(openai.HTTPError(http.StatusServiceUnavailable, "The gateway is shutting down and no replica has started the request. Please retry."), reasonShutdown)
)

// refuse answers an error the gateway decided itself and counts it.
func (g *Gateway) refuse(ex *exchange, err error) {
	rf := refusalOf(err)
	g.refundBefore(ex, rf.answer.Status, ex.w.Header())
	if rf == refusedBodyRead && ex.r.Context().Err() != nil {
		// The client left while sending its body (closed its connection,
		// reset its stream): no answer reaches it, and its request counts
		// as cancelled, not as a bad request of its.
		g.cancelled(ex, "")
		return
	}
	rf.write(ex.w)
	g.metrics.errors.WithLabelValues(ex.model, rf.reason).Inc()
	g.metrics.requests.WithLabelValues(ex.model, "", statusClass(rf.answer.Status)).Inc()
}
