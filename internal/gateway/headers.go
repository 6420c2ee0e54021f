package gateway

import (
	"net/http"
	"strings"
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
