package gateway

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/inferrail/inferrail/internal/openai"
)

// hopHeaders are meaningful for one connection only and never forwarded
// (RFC 9110 §7.6.1).
var hopHeaders = []string{
	"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// copyHeaders copies src's end-to-end headers into dst: all but the
// hop-by-hop ones and those src's Connection header names.
func copyHeaders(dst, src http.Header) {
	for k, vs := range src {
		dst[k] = append([]string(nil), vs...)
	}
	for _, conn := range src.Values("Connection") {
		for f := range strings.SplitSeq(conn, ",") {
			dst.Del(strings.TrimSpace(f))
		}
	}
	for _, h := range hopHeaders {
		dst.Del(h)
	}
}

// identity reports whether a response's body is in no content coding. An
// engine that compresses though asked not to is relayed as it sends, but
// its bytes say nothing: its stream is taken as whole (its [DONE] cannot
// be seen) and its output is estimated from the bytes relayed.
func identity(h http.Header) bool {
	ce := strings.TrimSpace(h.Get("Content-Encoding"))
	return ce == "" || strings.EqualFold(ce, "identity")
}

// isEventStream reports whether a response's Content-Type is
// text/event-stream, whatever its parameters.
func isEventStream(h http.Header) bool {
	mt, _, _ := strings.Cut(h.Get("Content-Type"), ";")
	return strings.EqualFold(strings.TrimSpace(mt), "text/event-stream")
}

// setResponseHeaders sets the client's response headers: the engine's,
// but for hop-by-hop ones and those only the gateway may say
// (setEngineHeaders), and the gateway's own about the attempt.
func setResponseHeaders(ex *exchange, a *attempt) {
	h := ex.w.Header()
	setEngineHeaders(h, a.resp.Header, ex.bill != nil) // a bill: admit wrote the x-ratelimit headers
	if _, ok := a.resp.Header["Content-Type"]; !ok {
		h["Content-Type"] = nil // an answer without one gets none, not net/http's guess
	}
	h.Set(openai.HeaderRequestID, ex.id)
	h.Set(openai.HeaderReplica, a.lease.Replica().ID)
	h.Set(openai.HeaderPolicy, ex.policy.Name())
	if ex.pred != nil {
		h.Set(openai.HeaderPromptTokens, strconv.Itoa(ex.pred.tokens))
		h.Set(openai.HeaderCachedTokens, strconv.Itoa(a.cached))
	}
	if e := a.lease.Expected(); e > 0 {
		h.Set(openai.HeaderEstimatedTTFT, strconv.FormatFloat(e, 'g', 6, 64))
	}
	h.Set(openai.HeaderGatewayMs, strconv.FormatFloat(float64(a.sent.Sub(ex.arrived).Microseconds())/1000, 'f', 3, 64))
}
