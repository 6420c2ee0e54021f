package gateway

import (
	"net/http"
	"slices"

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
		// Answered here, a preflight gets its request ID here too.
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
