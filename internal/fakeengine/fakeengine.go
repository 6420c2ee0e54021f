// Package fakeengine is a stand-in engine for the gateway's fleet-scale
// stress scenarios: one process listening on many loopback ports, each an
// engine that answers chats at once and serves a vLLM metrics page, so a
// two-core machine can put 64 replicas behind a gateway where 64
// simulators would not fit. Its page is stamped: vllm:num_requests_running
// is the Unix time in milliseconds at which the page was rendered, modulo
// 2^31 (the gateway takes no larger count), so a decision log, which
// records the running count each decision read, shows how old the report
// behind every decision was (StampTime). Ports may instead serve a
// hostile page: 50 MB, or one that never ends. It is not part of the
// product.
package fakeengine

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// What a port's /metrics serves.
const (
	// PageStamped is a small vLLM page whose num_requests_running is the
	// Unix millisecond the page was rendered in.
	PageStamped = "stamped"
	// PageHuge is a valid page of HugeBytes (50 MB by default).
	PageHuge = "huge"
	// PageEndless is a page that never ends: lines until the reader goes.
	PageEndless = "endless"
)

// Engine is one port's engine. Safe for concurrent use.
type Engine struct {
	model     string
	page      string
	hugeBytes int64
	queries   atomic.Int64 // pages served, reported as prefix-cache queries
}

// New returns an engine serving model whose /metrics serves page
// (PageStamped, PageHuge or PageEndless); hugeBytes sizes PageHuge.
func New(model, page string, hugeBytes int64) (*Engine, error) {
	switch page {
	case PageStamped, PageHuge, PageEndless:
	default:
		return nil, fmt.Errorf("fakeengine: page %q: want %s, %s or %s", page, PageStamped, PageHuge, PageEndless)
	}
	if model == "" {
		return nil, errors.New("fakeengine: a model is required")
	}
	return &Engine{model: model, page: page, hugeBytes: hugeBytes}, nil
}

// ServeHTTP answers /health, /v1/models, /metrics and chat completions.
func (e *Engine) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/health":
		w.WriteHeader(http.StatusOK)
	case r.URL.Path == "/v1/models":
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"object":"list","data":[{"id":%q,"object":"model","created":0,"owned_by":"vllm","root":%q,"max_model_len":32768}]}`, e.model, e.model)
	case r.URL.Path == "/metrics":
		e.serveMetrics(w)
	case r.URL.Path == "/v1/chat/completions" && r.Method == http.MethodPost:
		e.serveChat(w, r)
	default:
		http.NotFound(w, r)
	}
}

// chatRequest is what serveChat reads of a chat request.
type chatRequest struct {
	MaxTokens int  `json:"max_tokens"`
	Stream    bool `json:"stream"`
}

// serveChat answers a non-streamed chat at once with max_tokens tokens
// (16 when unset); a streamed one gets one chunk, the usage and [DONE].
func (e *Engine) serveChat(w http.ResponseWriter, r *http.Request) {
	var req chatRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 8<<20)).Decode(&req); err != nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"object":"error","message":%q,"type":"BadRequestError","param":null,"code":400}`, "invalid JSON: "+err.Error())
		return
	}
	n := req.MaxTokens
	if n <= 0 {
		n = 16
	}
	const prompt = 12
	usage := fmt.Sprintf(`{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}`, prompt, n, prompt+n)
	content := strings.Repeat("ok ", n)
	if req.Stream {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "data: {\"id\":\"chatcmpl-fake\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":%q,\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":%q},\"finish_reason\":\"length\"}]}\n\n", e.model, content)
		fmt.Fprintf(w, "data: {\"id\":\"chatcmpl-fake\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":%q,\"choices\":[],\"usage\":%s}\n\n", e.model, usage)
		fmt.Fprint(w, "data: [DONE]\n\n")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"id":"chatcmpl-fake","object":"chat.completion","created":0,"model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":%q},"finish_reason":"length"}],"usage":%s}`,
		e.model, content, usage)
}

func (e *Engine) serveMetrics(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	switch e.page {
	case PageStamped:
		_, _ = w.Write(e.AppendPage(nil, time.Now()))
	case PageHuge:
		writeLines(w, e.model, e.hugeBytes)
	case PageEndless:
		writeLines(w, e.model, -1)
	}
}

// stampModulus keeps a stamp a running count the gateway believes: a page
// that counts 2^31 requests or more is unreadable.
const stampModulus = 1 << 31

// StampTime is the time a page stamped stamp was rendered, read at or
// after it by less than 2^31 ms (24 days).
func StampTime(stamp int64, readAt time.Time) time.Time {
	ms := readAt.UnixMilli()
	return time.UnixMilli(ms - ((ms%stampModulus-stamp)%stampModulus+stampModulus)%stampModulus)
}

// AppendPage appends the stamped page rendered at now.
func (e *Engine) AppendPage(b []byte, now time.Time) []byte {
	q := e.queries.Add(1)
	labels := `{engine="0",model_name="` + e.model + `"}`
	gauge := func(name, help string, v string) {
		b = append(b, "# HELP "+name+" "+help+"\n# TYPE "+name+" gauge\n"+name+labels+" "+v+"\n"...)
	}
	counter := func(name, help string, v int64) {
		b = append(b, "# HELP "+name+"_total "+help+"\n# TYPE "+name+"_total counter\n"+name+"_total"+labels+" "...)
		b = strconv.AppendInt(b, v, 10)
		b = append(b, ".0\n"...)
	}
	gauge("vllm:num_requests_running", "Number of requests in model execution batches (here: the Unix millisecond the page was rendered, modulo 2^31).",
		strconv.FormatInt(now.UnixMilli()%stampModulus, 10)+".0")
	gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", "0.0")
	gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", "0.0")
	counter("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.", q)
	counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", 0)
	counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.", 0)
	b = append(b, "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n# TYPE vllm:cache_config_info gauge\n"...)
	b = append(b, `vllm:cache_config_info{block_size="16",cache_dtype="auto",engine="0",num_gpu_blocks="4096"} 1.0`+"\n"...)
	return b
}

// writeLines writes a valid page of counter samples until limit bytes
// (forever when limit < 0) or until the reader goes away.
func writeLines(w io.Writer, model string, limit int64) {
	var chunk []byte
	chunk = append(chunk, "# HELP vllm:request_success_total Count of successfully processed requests.\n# TYPE vllm:request_success_total counter\n"...)
	for i := 0; len(chunk) < 64<<10; i++ {
		chunk = append(chunk, `vllm:request_success_total{engine="0",finished_reason="f`...)
		chunk = strconv.AppendInt(chunk, int64(i), 10)
		chunk = append(chunk, `",model_name="`+model+`"} 1.0`+"\n"...)
	}
	var written int64
	for limit < 0 || written < limit {
		p := chunk
		if limit >= 0 && int64(len(p)) > limit-written {
			p = p[:limit-written]
		}
		n, err := w.Write(p)
		written += int64(n)
		if err != nil {
			return
		}
	}
}

// Fleet is the engines of one process, each on its own listener.
type Fleet struct {
	URLs []string // base URLs, in the order of the pages given
	srvs []*http.Server
	wg   sync.WaitGroup
}

// Start starts one engine per entry of pages, each on its own loopback
// port; with sharePort, each on its own loopback address instead
// (127.1.0.1, 127.1.0.2, ...), all on one port, as the members of a DNS
// group are.
func Start(model string, pages []string, hugeBytes int64, sharePort bool) (*Fleet, error) {
	f := &Fleet{}
	port := "0"
	for i, p := range pages {
		e, err := New(model, p, hugeBytes)
		if err != nil {
			f.Close()
			return nil, err
		}
		addr := "127.0.0.1:0"
		if sharePort {
			addr = net.JoinHostPort(LoopbackIP(i), port)
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			f.Close()
			return nil, err
		}
		if sharePort && port == "0" {
			_, port, _ = net.SplitHostPort(ln.Addr().String())
		}
		srv := &http.Server{Handler: e, ReadHeaderTimeout: 10 * time.Second}
		f.srvs = append(f.srvs, srv)
		f.URLs = append(f.URLs, "http://"+ln.Addr().String())
		f.wg.Go(func() { _ = srv.Serve(ln) })
	}
	return f, nil
}

// LoopbackIP is the i-th loopback address Start's shared-port engines
// listen on: 127.1.0.1 for 0, up to 127.1.255.250 (65,280 addresses).
func LoopbackIP(i int) string {
	return fmt.Sprintf("127.1.%d.%d", i/250, i%250+1)
}

// Close stops every engine at once, dropping open connections.
func (f *Fleet) Close() {
	for _, s := range f.srvs {
		_ = s.Close()
	}
	f.wg.Wait()
}

// Command runs `fake-engines --pages KIND[xN],... --model M` until ctx
// ends: what `inferrail-bench fake-engines` does. It writes one line per
// engine to stdout, "engine URL", in the order of --pages, then "ready".
func Command(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fake-engines", flag.ContinueOnError)
	fs.SetOutput(stderr)
	spec := fs.String("pages", PageStamped, "what each engine's /metrics serves, comma-separated, each stamped, huge or endless, with an optional xN to repeat it")
	model := fs.String("model", "inferrail/sim-8b", "the model every engine serves")
	huge := fs.Int64("huge-bytes", 50<<20, "size of a huge page")
	sharePort := fs.Bool("share-port", false, "listen on 127.1.0.1, 127.1.0.2, ... all on one port, as a DNS group's members, instead of on ports of 127.0.0.1")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("fake-engines: unexpected argument %q", fs.Arg(0))
	}
	pages, err := ParsePages(*spec)
	if err != nil {
		return err
	}
	if *sharePort && len(pages) > 65280 {
		return fmt.Errorf("fake-engines: --share-port has room for 65280 engines, not %d", len(pages))
	}
	f, err := Start(*model, pages, *huge, *sharePort)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, u := range f.URLs {
		fmt.Fprintln(stdout, "engine", u)
	}
	fmt.Fprintln(stdout, "ready")
	<-ctx.Done()
	return nil
}

// ParsePages reads a --pages value: kinds separated by commas, each with an
// optional xN repeating it N times ("stampedx64,hugex10").
func ParsePages(spec string) ([]string, error) {
	var out []string
	for part := range strings.SplitSeq(spec, ",") {
		kind, count, found := strings.Cut(strings.TrimSpace(part), "x")
		n := 1
		if found {
			var err error
			if n, err = strconv.Atoi(count); err != nil || n < 1 || n > 100000 {
				return nil, fmt.Errorf("fake-engines: --pages %q: count %q must be a whole number from 1 to 100000", spec, count)
			}
		}
		switch kind {
		case PageStamped, PageHuge, PageEndless:
		default:
			return nil, fmt.Errorf("fake-engines: --pages %q: kind %q: want %s, %s or %s", spec, kind, PageStamped, PageHuge, PageEndless)
		}
		for range n {
			out = append(out, kind)
		}
	}
	return out, nil
}
