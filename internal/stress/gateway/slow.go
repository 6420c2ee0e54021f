package gateway

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inferrail/inferrail/internal/stress"

	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/measure"
	"github.com/inferrail/inferrail/internal/openai"
	"github.com/inferrail/inferrail/internal/procs"
)

// SlowReadersLoad is gw-slow-readers: clients that start a large stream
// and stop reading it.
type SlowReadersLoad struct {
	// Clients each start one stream. Must be positive.
	Clients int
	// StreamBytes is the size of each stream the firehose engine sends.
	// Must be positive.
	StreamBytes int64
	// Stall is how long the clients hold their streams without reading.
	// Must be positive.
	Stall time.Duration
	// Others are ordinary chats sent through the gateway during the stall.
	// Must not be negative.
	Others int
}

// Validate reports every setting that cannot run.
func (l SlowReadersLoad) Validate() error {
	return errors.Join(stress.Positive("clients", l.Clients), stress.Positive("stall", l.Stall),
		stress.Positive("stream_bytes", l.StreamBytes), stress.NotNegative("others", l.Others))
}

// SlowReadersFigures is what gw-slow-readers measured.
type SlowReadersFigures struct {
	Clients     int   `json:"clients"`
	StreamBytes int64 `json:"stream_bytes"`
	// ReadBeforeStall is what each client read before it stopped.
	ReadBeforeStall int64 `json:"read_before_stall_bytes"`
	// EngineWritten* are the bytes the firehose engine had managed to
	// write into each stream at the end of the stall: what TCP buffers and
	// the gateway held between it and the stopped client.
	EngineWrittenMin   int64 `json:"engine_written_min_bytes"`
	EngineWrittenMax   int64 `json:"engine_written_max_bytes"`
	EngineWrittenTotal int64 `json:"engine_written_total_bytes"`
	// Gateway resident memory: idle baseline, peak and last sample of the
	// stall, peak of the drain.
	BaselineRSSBytes   int64 `json:"baseline_rss_bytes"`
	StallPeakRSSBytes  int64 `json:"stall_peak_rss_bytes"`
	StallEndRSSBytes   int64 `json:"stall_end_rss_bytes"`
	DrainPeakRSSBytes  int64 `json:"drain_peak_rss_bytes"`
	AfterIdleRSSBytes  int64 `json:"after_idle_rss_bytes"`
	StallAboveBaseline int64 `json:"stall_peak_above_baseline_bytes"`
	// Others: ordinary chats through the same gateway during the stall.
	Others        int                 `json:"others"`
	OthersErrors  int                 `json:"others_errors"`
	OthersKinds   map[string]int      `json:"others_error_kinds,omitempty"`
	OthersSamples []string            `json:"others_error_samples,omitempty"`
	OthersLatency measure.Percentiles `json:"others_latency"`
	// Drain: the clients read again, to the end of every stream.
	DrainCompleted int      `json:"drain_completed"`
	DrainBytes     int64    `json:"drain_bytes"`
	DrainSeconds   float64  `json:"drain_seconds"`
	DrainMiBPerSec float64  `json:"drain_mib_per_second"`
	DrainErrors    []string `json:"drain_errors,omitempty"`
	// After everything closed.
	IdleAfter        idleState `json:"idle_after"`
	ClientConnsAfter int       `json:"client_conns_after"`
}

// firehoseModel is the model only the firehose engine serves.
const firehoseModel = "firehose"

func runGWSlowReaders(ctx context.Context, r *gwRun) error {
	l := r.c.SlowReaders
	sims, gw, fh, err := r.firehoseFleet(ctx, l.StreamBytes)
	if err != nil {
		return err
	}
	admin := procs.AdminClient()
	defer admin.CloseIdleConnections()
	others := gwClient(8)
	defer others.CloseIdleConnections()
	warmChats(ctx, others, gw, 50, procs.SimModel)
	f := &SlowReadersFigures{Clients: l.Clients, StreamBytes: l.StreamBytes, ReadBeforeStall: readFirst, Others: l.Others}
	f.BaselineRSSBytes = idleRSS(ctx, gw.Pid, time.Second)

	sampler := startRSSSampler(ctx, gw.Pid, 100*time.Millisecond)
	readers, err := startStalledReaders(ctx, strings.TrimPrefix(gw.URL, "http://"), l.Clients)
	defer func() {
		for _, sr := range readers {
			if sr != nil {
				sr.conn.Close()
			}
		}
	}()
	if err != nil {
		return fmt.Errorf("start a stalled reader: %w", err)
	}
	stallStart := time.Now()
	f.chatMeanwhile(ctx, others, gw.URL+"/v1/chat/completions", l.Others)
	measure.SleepUntil(ctx, stallStart.Add(l.Stall))
	f.readStall(sampler.stop(), fh.written())
	r.log.Info("gw-slow-readers stalled", "rss_above_baseline_mib", float64(f.StallAboveBaseline)/(1<<20),
		"engine_written_total_mib", float64(f.EngineWrittenTotal)/(1<<20))

	sampler = startRSSSampler(ctx, gw.Pid, 100*time.Millisecond)
	f.drain(readers, l.StreamBytes)
	f.DrainPeakRSSBytes = peak(sampler.stop())
	for _, sr := range readers {
		sr.conn.Close()
	}
	others.CloseIdleConnections()
	_, f.IdleAfter = waitIdle(ctx, admin, gw, sims, 10*time.Second)
	time.Sleep(200 * time.Millisecond)
	f.ClientConnsAfter, _ = gw.ClientConns()
	f.AfterIdleRSSBytes = idleRSS(ctx, gw.Pid, time.Second)
	r.res.SlowReaders = f
	slowReadersChecks(r, f, l)
	return nil
}

// readFirst is how much of its stream a slow reader reads before it
// stops reading.
const readFirst = 64 << 10

// firehoseFleet starts gw-slow-readers' engines, a --zero-latency
// simulator child and the firehose streaming streamBytes a request, and a
// gateway over both, the firehose serving its own model.
func (r *gwRun) firehoseFleet(ctx context.Context, streamBytes int64) ([]*gwReplica, *procs.Gateway, *firehose, error) {
	sims, err := r.simChildren(ctx, 1, []string{"--zero-latency"})
	if err != nil {
		return nil, nil, nil, err
	}
	fh, err := startFirehose(streamBytes)
	if err != nil {
		return nil, nil, nil, err
	}
	r.replicas = append(r.replicas, &gwReplica{ID: "firehose", URL: fh.url, stop: fh.close})
	r.res.Setup.Simulators = "1 inferrail-sim child process (--zero-latency) and the harness's firehose engine (in process)"
	cfg := gwConfig(sims, healthDefault)
	cfg.Models = append(cfg.Models, config.Model{Name: firehoseModel})
	cfg.Replicas = append(cfg.Replicas, config.Replica{ID: "firehose", URL: fh.url, Models: []string{firehoseModel}, MaxConcurrency: 64, MaxPending: 64})
	gw, err := r.gateway(ctx, cfg)
	return sims, gw, fh, err
}

// startStalledReaders starts n firehose streams through the gateway at
// addr at once, each read to readFirst and then left unread. On an error
// the readers started are returned with it, for closing.
func startStalledReaders(ctx context.Context, addr string, n int) ([]*stalledReader, error) {
	readers := make([]*stalledReader, n)
	var wg sync.WaitGroup
	var openErr error
	var mu sync.Mutex
	for i := range readers {
		wg.Go(func() {
			sr, err := startStalledReader(ctx, addr, i, readFirst)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && openErr == nil {
				openErr = err
			}
			readers[i] = sr
		})
	}
	wg.Wait()
	return readers, openErr
}

// chatMeanwhile sends n ordinary chats, four at a time, while the slow
// readers hold their streams.
func (f *SlowReadersFigures) chatMeanwhile(ctx context.Context, client *http.Client, url string, n int) {
	var lat []time.Duration
	var tally stress.ErrorTally
	var mu sync.Mutex
	stress.Pool(ctx, 0, n, 4, func(i int) {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		t := time.Now()
		_, _, err := postChat(rctx, client, url, gwChatBody(procs.SimModel, i, 4), "", 4)
		d := time.Since(t)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			tally.Add(measure.Classify(rctx, err))
		} else {
			lat = append(lat, d)
		}
	})
	f.OthersErrors, f.OthersKinds, f.OthersSamples = tally.Result()
	f.OthersLatency = measure.Summarize(lat)
}

// readStall takes the gateway's memory over the stall and what the
// firehose had written into the stuck streams.
func (f *SlowReadersFigures) readStall(stall []rssSample, written []int64) {
	f.StallPeakRSSBytes = peak(stall)
	if len(stall) > 0 {
		f.StallEndRSSBytes = stall[len(stall)-1].RSS
	}
	f.StallAboveBaseline = f.StallPeakRSSBytes - f.BaselineRSSBytes
	if len(written) > 0 {
		f.EngineWrittenMin = slices.Min(written)
		f.EngineWrittenMax = slices.Max(written)
		for _, w := range written {
			f.EngineWrittenTotal += w
		}
	}
}

// drain reads every stalled stream to its end, all at once.
func (f *SlowReadersFigures) drain(readers []*stalledReader, streamBytes int64) {
	drainStart := time.Now()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, sr := range readers {
		wg.Go(func() {
			n, err := sr.drain(streamBytes)
			mu.Lock()
			defer mu.Unlock()
			f.DrainBytes += n
			if err != nil {
				if len(f.DrainErrors) < measure.MaxErrorSamples {
					f.DrainErrors = append(f.DrainErrors, err.Error())
				}
				return
			}
			f.DrainCompleted++
		})
	}
	wg.Wait()
	f.DrainSeconds = time.Since(drainStart).Seconds()
	if f.DrainSeconds > 0 {
		f.DrainMiBPerSec = float64(f.DrainBytes) / (1 << 20) / f.DrainSeconds
	}
}

func slowReadersChecks(r *gwRun, f *SlowReadersFigures, l SlowReadersLoad) {
	r.check("gateway memory while 20 clients do not read", "bounded: a few MiB above the baseline, far below what the engine wrote",
		fmt.Sprintf("peak %s above the %s baseline, while the engine had written %s into the stuck streams", stress.MiB(f.StallAboveBaseline),
			stress.MiB(f.BaselineRSSBytes), stress.MiB(f.EngineWrittenTotal)), f.StallAboveBaseline < 32<<20 && f.StallAboveBaseline < f.EngineWrittenTotal/4)
	r.check("other requests served meanwhile", fmt.Sprintf("%d of %d", l.Others, l.Others),
		fmt.Sprintf("%d errors, p50 %s, p99 %s", f.OthersErrors, stress.Secs(f.OthersLatency.P50), stress.Secs(f.OthersLatency.P99)), f.OthersErrors == 0)
	r.check("every stream read to its end afterwards", fmt.Sprintf("%d of %d", l.Clients, l.Clients),
		fmt.Sprintf("%d (%s in %.2f s, %.0f MiB/s)", f.DrainCompleted, stress.MiB(f.DrainBytes+int64(l.Clients)*readFirst), f.DrainSeconds, f.DrainMiBPerSec),
		f.DrainCompleted == l.Clients)
	r.check("nothing held afterwards", "gateway in flight 0, 0 client connections",
		fmt.Sprintf("in flight %.0f, connections %d", f.IdleAfter.GatewayInFlight, f.ClientConnsAfter), f.IdleAfter.idle() && f.ClientConnsAfter == 0)
	r.note("Kernel socket buffers (loopback, tcp_rmem/tcp_wmem autotuning) hold what the engine wrote beyond what the client read; " +
		"they are not in the gateway's resident memory, which is what the check looks at.")
}

// stalledReader is a client that started a firehose stream and stopped
// reading it.
type stalledReader struct {
	conn net.Conn
	resp *http.Response
	read int64
}

func startStalledReader(ctx context.Context, addr string, i int, readFirst int64) (*stalledReader, error) {
	conn, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	body := gwStreamBody(firehoseModel, i, 16, false)
	req := fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", addr, len(body), body)
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(conn, req); err != nil {
		conn.Close()
		return nil, err
	}
	resp, err := http.ReadResponse(bufio.NewReaderSize(conn, 4096), nil)
	if err != nil {
		conn.Close()
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		conn.Close()
		return nil, fmt.Errorf("status %d", resp.StatusCode)
	}
	n, err := io.CopyN(io.Discard, resp.Body, readFirst)
	if err != nil {
		conn.Close()
		return nil, err
	}
	_ = conn.SetDeadline(time.Time{})
	return &stalledReader{conn: conn, resp: resp, read: n}, nil
}

// drain reads the rest of the stream and checks it ended with [DONE]; it
// returns the bytes read.
func (s *stalledReader) drain(streamBytes int64) (int64, error) {
	_ = s.conn.SetDeadline(time.Now().Add(2 * time.Minute))
	tail := procs.NewTailBuffer(64)
	n, err := io.Copy(io.MultiWriter(io.Discard, tail), s.resp.Body)
	s.resp.Body.Close()
	if err != nil {
		return n, err
	}
	if !strings.HasSuffix(tail.String(), "data: [DONE]\n\n") {
		return n, fmt.Errorf("stream did not end with data: [DONE] after %d bytes", s.read+n)
	}
	if s.read+n < streamBytes {
		return n, fmt.Errorf("stream ended after %d bytes, want at least %d", s.read+n, streamBytes)
	}
	return n, nil
}

// firehose is a minimal engine that streams a large SSE body as fast as
// the connection takes it. It counts what it wrote into each stream.
type firehose struct {
	url   string
	size  int64
	block []byte
	srv   *http.Server
	done  chan struct{}

	mu     sync.Mutex
	counts []*atomic.Int64 // bytes written per stream, in arrival order; guarded by mu
}

func startFirehose(size int64) (*firehose, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	line := `data: {"id":"chatcmpl-firehose","object":"chat.completion.chunk","created":0,"model":"firehose","choices":[{"index":0,"delta":{"content":"` +
		strings.Repeat("x", 900) + `"},"finish_reason":null}]}` + "\n\n"
	f := &firehose{url: "http://" + ln.Addr().String(), size: size, block: bytes.Repeat([]byte(line), 64), done: make(chan struct{})}
	f.srv = &http.Server{Handler: f, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(f.done)
		_ = f.srv.Serve(ln)
	}()
	return f, nil
}

func (f *firehose) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/health":
		w.WriteHeader(http.StatusOK)
	case r.URL.Path == "/v1/models":
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"list","data":[]}`)
	case r.URL.Path == "/v1/chat/completions" && r.Method == http.MethodPost:
		_, _ = io.Copy(io.Discard, r.Body)
		count := new(atomic.Int64)
		f.mu.Lock()
		f.counts = append(f.counts, count)
		f.mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		rc := http.NewResponseController(w)
		for count.Load() < f.size {
			n, err := w.Write(f.block)
			count.Add(int64(n))
			if err != nil {
				return
			}
			_ = rc.Flush()
		}
		n, _ := io.WriteString(w, "data: [DONE]\n\n")
		count.Add(int64(n))
	default:
		http.NotFound(w, r)
	}
}

// written returns the bytes written into each stream so far.
func (f *firehose) written() []int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]int64, len(f.counts))
	for i, c := range f.counts {
		out[i] = c.Load()
	}
	return out
}

func (f *firehose) close() {
	_ = f.srv.Close()
	<-f.done
}

// SlowBodyLoad is gw-slow-body: one large request body sent a byte at a
// time.
type SlowBodyLoad struct {
	// BodyBytes is the size of the body. Must be at least 1 KiB.
	BodyBytes int
}

// Validate reports every setting that cannot run.
func (l SlowBodyLoad) Validate() error {
	if l.BodyBytes < 1<<10 {
		return fmt.Errorf("body_bytes: must be at least 1024, got %d", l.BodyBytes)
	}
	return nil
}

// SlowBodyFigures is what gw-slow-body measured.
type SlowBodyFigures struct {
	BodyBytes int `json:"body_bytes"`
	// Writes is the number of write calls, one per byte.
	Writes int `json:"writes"`
	// UploadSeconds runs from connecting to the last byte written;
	// AnswerSeconds from the last byte to the end of the answer.
	UploadSeconds float64 `json:"upload_seconds"`
	AnswerSeconds float64 `json:"answer_seconds"`
	Status        int     `json:"status"`
	Replica       string  `json:"replica"`
	Error         string  `json:"error,omitempty"`
	// Gateway resident memory: idle baseline, peak while the body arrived
	// and until the answer, idle afterwards.
	BaselineRSSBytes int64            `json:"baseline_rss_bytes"`
	PeakRSSBytes     int64            `json:"peak_rss_bytes"`
	AfterRSSBytes    int64            `json:"after_idle_rss_bytes"`
	Progress         []SlowBodySample `json:"progress"`
}

// SlowBodySample is the gateway's memory when so much of the body was
// sent.
type SlowBodySample struct {
	Seconds   float64 `json:"seconds"`
	SentBytes int64   `json:"sent_bytes"`
	RSSBytes  int64   `json:"rss_bytes"`
}

func runGWSlowBody(ctx context.Context, r *gwRun) error {
	l := r.c.SlowBody
	gw := r.gw
	warm := gwClient(2)
	warmChats(ctx, warm, gw, 20, procs.SimModel)
	warm.CloseIdleConnections()
	f := &SlowBodyFigures{BodyBytes: l.BodyBytes}
	f.BaselineRSSBytes = idleRSS(ctx, gw.Pid, time.Second)

	addr := strings.TrimPrefix(gw.URL, "http://")
	conn, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Minute))

	var sent atomic.Int64
	start := time.Now()
	stopSampling := make(chan struct{})
	var swg sync.WaitGroup
	swg.Go(func() { f.Progress = sampleUpload(gw.Pid, start, &sent, stopSampling) })
	werr := dripBody(ctx, conn, addr, paddedChat(l.BodyBytes), f, &sent)
	uploaded := time.Now()
	f.UploadSeconds = uploaded.Sub(start).Seconds()
	if werr != nil {
		f.Error = werr.Error()
	}
	f.readAnswer(conn)
	f.AnswerSeconds = time.Since(uploaded).Seconds()
	close(stopSampling)
	swg.Wait()
	for _, s := range f.Progress {
		f.PeakRSSBytes = max(f.PeakRSSBytes, s.RSSBytes)
	}
	f.AfterRSSBytes = idleRSS(ctx, gw.Pid, 2*time.Second)
	f.Progress = thinSamples(f.Progress, 20)
	r.res.SlowBody = f
	r.check("request completes", "200 with a good chat", fmt.Sprintf("status %d %s", f.Status, f.Error), f.Status == http.StatusOK && f.Error == "")
	above := f.PeakRSSBytes - f.BaselineRSSBytes
	r.check("gateway memory while the body arrives", "about the body once (the gateway buffers whole bodies): under 1.5× its size above the baseline",
		fmt.Sprintf("peak %s above the %s baseline for a %s body, over %.1f s of upload; %s idle afterwards", stress.MiB(above),
			stress.MiB(f.BaselineRSSBytes), stress.MiB(int64(f.BodyBytes)), f.UploadSeconds, stress.MiB(f.AfterRSSBytes)), above < int64(f.BodyBytes)*3/2)
	r.note("The gateway allocates the body once, 1 MiB and then exactly its size (TestReadAllSizedAllocates). Above that, resident memory " +
		"holds the collector's headroom: with the body live, GOGC=100 lets garbage grow to about the live heap again before a collection, " +
		"and a one-byte-a-time upload lasts long enough to fill it with whatever the gateway's background work throws away. Until " +
		"2026-12-02 that was a 64 KiB line buffer for every engine scrape (ten a second): 17.0 MiB above the baseline for this body, " +
		"against 10.9 MiB since the buffers are recycled.")
	return nil
}

// paddedChat is a short chat padded with JSON whitespace to n bytes.
func paddedChat(n int) []byte {
	head := []byte(`{"model":"inferrail/sim-8b","messages":[{"role":"user","content":"Hello"}],"max_tokens":4`)
	body := make([]byte, n)
	copy(body, head)
	for i := len(head); i < len(body)-1; i++ {
		body[i] = ' '
	}
	body[len(body)-1] = '}'
	return body
}

// sampleUpload reads pid's resident memory and how much of the body was
// sent every 250 ms until stop is closed.
func sampleUpload(pid int, start time.Time, sent *atomic.Int64, stop <-chan struct{}) []SlowBodySample {
	var out []SlowBodySample
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		rss, _ := procs.ResidentBytes(pid)
		out = append(out, SlowBodySample{Seconds: time.Since(start).Seconds(), SentBytes: sent.Load(), RSSBytes: rss})
		select {
		case <-stop:
			return out
		case <-t.C:
		}
	}
}

// dripBody writes a POST of body to the chat route over conn, the body
// one byte per write call, counting the writes in f and the bytes sent in
// sent.
func dripBody(ctx context.Context, conn net.Conn, host string, body []byte, f *SlowBodyFigures, sent *atomic.Int64) error {
	headers := fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n", host, len(body))
	if _, err := io.WriteString(conn, headers); err != nil {
		return err
	}
	for i := range body {
		if _, err := conn.Write(body[i : i+1]); err != nil {
			return fmt.Errorf("write byte %d: %w", i, err)
		}
		f.Writes++
		if i&0xfff == 0 {
			sent.Store(int64(i))
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
	}
	sent.Store(int64(len(body)))
	return nil
}

// readAnswer reads the answer to the slow body from conn and checks it,
// keeping the first problem in f.Error.
func (f *SlowBodyFigures) readAnswer(conn net.Conn) {
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		if f.Error == "" {
			f.Error = "read answer: " + err.Error()
		}
		return
	}
	f.Status, f.Replica = resp.StatusCode, resp.Header.Get(openai.HeaderReplica)
	data, rerr := io.ReadAll(resp.Body)
	resp.Body.Close()
	switch {
	case rerr != nil:
		f.Error = rerr.Error()
	case resp.StatusCode == http.StatusOK:
		if err := stress.CheckFull(data, 4); err != nil {
			f.Error = err.Error()
		}
	default:
		f.Error = fmt.Sprintf("status %d: %.200s", resp.StatusCode, data)
	}
}

// thinSamples keeps at most n samples, evenly spaced, the last included.
func thinSamples(s []SlowBodySample, n int) []SlowBodySample {
	if len(s) <= n {
		return s
	}
	out := make([]SlowBodySample, 0, n)
	for i := range n - 1 {
		out = append(out, s[i*(len(s)-1)/(n-1)])
	}
	return append(out, s[len(s)-1])
}

// slowBodyLimits lets gw-slow-body's request take ten minutes and its body
// 64 MiB.
func slowBodyLimits(_ *Config, cfg *config.Config) {
	cfg.Server.RequestTimeout = config.Duration(10 * time.Minute)
	cfg.Server.MaxBodyBytes = 64 << 20
}

// AllBytes is what the slow readers' streams hold together.
func (l SlowReadersLoad) AllBytes() int64 { return int64(l.Clients) * l.StreamBytes }
