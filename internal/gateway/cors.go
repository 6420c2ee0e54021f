package gateway

import (
	"net/http"
	"slices"
	"strings"

	"github.com/inferrail/inferrail/internal/openai"
)

// CORS on the client port, as vLLM's server has it by default, so that a
// web page an origin allows may call the API from a browser. Preflights
// are answered before keys are asked for: a browser sends none with them.
// Credentials (cookies) are never allowed; API keys travel in the
// Authorization header, which a preflight admits.

// corsMethods are the methods the client port serves.
const corsMethods = "GET, HEAD, POST, OPTIONS"

// withCORS wraps the client port's handler with CORS for the given
// origins ("*": any); with none it returns h unchanged.
func withCORS(h http.Handler, origins []string) http.Handler {
	if len(origins) == 0 {
		return h
	}
	anyOrigin := slices.Contains(origins, "*")
	allowed := func(o string) bool { return anyOrigin || slices.Contains(origins, o) }
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		if origin == "" {
			h.ServeHTTP(w, r)
			return
		}
		hd := w.Header()
		if !anyOrigin {
			hd.Add("Vary", "Origin")
		}
		ok := allowed(origin)
		if ok {
			if anyOrigin {
				hd.Set("Access-Control-Allow-Origin", "*")
			} else {
				hd.Set("Access-Control-Allow-Origin", origin)
			}
		}
		if r.Method != http.MethodOptions || r.Header.Get("Access-Control-Request-Method") == "" {
			if ok {
				// The ids and retry times a client may read.
				hd.Set("Access-Control-Expose-Headers", "*")
			}
			h.ServeHTTP(w, r)
			return
		}
		// Answered here, a preflight gets its request ID here too, and
		// any body it announces is not waited for (skipBody).
		skipBody(w, r)
		hd.Set(openai.HeaderRequestID, requestIDFor(r))
		if !ok {
			hd.Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte("Disallowed CORS origin"))
			return
		}
		hd.Set("Access-Control-Allow-Methods", corsMethods)
		if asked := r.Header.Get("Access-Control-Request-Headers"); asked != "" {
			hd.Set("Access-Control-Allow-Headers", asked)
		}
		hd.Set("Access-Control-Max-Age", "600")
		w.WriteHeader(http.StatusNoContent)
	})
}

// setEngineHeaders sets an engine's end-to-end response headers (those
// copyHeaders copies) on the client's, but for those only the gateway
// may say:
//   - CORS's: the gateway alone decides CORS (withCORS), and an engine's
//     own Access-Control-* headers would grant origins it does not list,
//     or cookies. The Vary entries they imply go too; the engine's others
//     follow the gateway's own.
//   - X-Inferrail-*: an engine behind another inferrail, or a proxy,
//     may send them, and the client would read them as this gateway's
//     word (a prediction it did not make, say).
//   - x-ratelimit-*, when ownRate (the gateway limits the request and
//     wrote its own at admission): the client gets one set of budgets,
//     the gateway's whole, never its Reset beside an inner proxy's Limit
//     and Remaining. A request the gateway does not limit gets the
//     engine's.
//
// The engine's headers are sifted apart first, so a Connection header of
// its naming one of the gateway's removes none.
func setEngineHeaders(dst, src http.Header, ownRate bool) {
	h := make(http.Header, len(src))
	copyHeaders(h, src)
	var vary []string
	for _, v := range h["Vary"] {
		for f := range strings.SplitSeq(v, ",") {
			if f = strings.TrimSpace(f); f != "" && !strings.EqualFold(f, "Origin") && !isCORSHeader(f) {
				vary = append(vary, f)
			}
		}
	}
	own := dst["Vary"]
	delete(dst, "Vary")
	delete(h, "Vary")
	for k, vs := range h {
		if !isCORSHeader(k) && !hasPrefixFold(k, "X-Inferrail-") && !(ownRate && hasPrefixFold(k, "X-Ratelimit-")) {
			dst[k] = vs
		}
	}
	if vary = append(own, vary...); len(vary) > 0 {
		dst["Vary"] = []string{strings.Join(vary, ", ")}
	}
}

// isCORSHeader reports whether a header's name is CORS's.
func isCORSHeader(name string) bool { return hasPrefixFold(name, "Access-Control-") }

// hasPrefixFold reports whether a header's name begins with prefix,
// whatever the case of either.
func hasPrefixFold(name, prefix string) bool {
	return len(name) >= len(prefix) && strings.EqualFold(name[:len(prefix)], prefix)
}
