package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	"github.com/inferrail/inferrail/internal/blockhash"

	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/filewatch"
	"github.com/inferrail/inferrail/internal/index"
	"github.com/inferrail/inferrail/internal/load"
	"github.com/inferrail/inferrail/internal/tokenize"
	"github.com/inferrail/inferrail/internal/tokenize/chattemplate"
	"github.com/inferrail/inferrail/internal/tokenize/hf"
	"github.com/inferrail/inferrail/internal/tokenize/simtok"
)

// Results of edge tokenization, as counted in
// inferrail_tokenized_requests_total: tokenized, or why a request got no
// prediction.
const (
	tokOK          = "tokenized"
	tokInvalid     = "invalid"     // the body does not read as a request
	tokUnsupported = "unsupported" // content the tokenizer cannot follow (images, batches)
	tokTemplate    = "template"    // a chat template in the request, or the model's refusing it (vLLM answers 400)
	tokBusy        = "busy"        // the worker queue was full
	tokSlow        = "slow"        // no result within tokenizer.max_wait
	tokUnavailable = "unavailable" // the model's tokenizer cannot prepare this kind of request (a chat without a chat template)
	tokDisagree    = "disagrees"   // the model's tokens differ from its engines' (see tokcheck.go)
)

// inlineBytes is the body size up to which tokenization runs on the
// request's own goroutine; larger bodies go to the worker pool.
const inlineBytes = 1 << 10

// promptTokenizer computes a model's prompt tokens as its engines do.
type promptTokenizer interface {
	// stop, when set, asks it to give up (the request stopped waiting);
	// it then returns an error. A nil stop never stops.
	PromptIDs(p *tokenize.Prompt, stop *atomic.Bool) ([]int, error)
	// CacheStats counts lookups of repeated prompt pieces that found them
	// tokenized already (hits) or not (misses).
	CacheStats() (hits, misses uint64)
}

// simTokenizer is the simulators' own builtin:sim.
type simTokenizer struct{ sim *simtok.Tokenizer }

// PromptIDs ignores stop: builtin:sim is linear and quick (a 4 MiB prompt
// in a fifth of a second).
func (t simTokenizer) PromptIDs(p *tokenize.Prompt, _ *atomic.Bool) ([]int, error) {
	return t.sim.PromptIDs(p), nil
}
func (t simTokenizer) CacheStats() (hits, misses uint64) { return t.sim.CacheStats() }

// hfTokenizer is a Hugging Face tokenizer.json, and its chat template for
// chat requests.
type hfTokenizer struct {
	hf   *hf.Tokenizer
	chat *chattemplate.Renderer
}

func (t hfTokenizer) PromptIDs(p *tokenize.Prompt, stop *atomic.Bool) ([]int, error) {
	switch {
	case p.Chat != nil:
		return t.chat.ChatIDsUntil(p, stop)
	case p.HasIDs:
		return p.IDs, nil // vLLM adds no special tokens to token prompts
	}
	return t.hf.EncodeUntil(nil, p.Text, p.AddSpecial, stop)
}

func (t hfTokenizer) CacheStats() (hits, misses uint64) { return t.hf.CacheStats() }

// modelTokenizer is a model's tokenizer and how its engines cut blocks.
type modelTokenizer struct {
	tok       promptTokenizer
	blockSize int
	// class is the transformers class a Hugging Face tokenizer follows,
	// for the startup log and --check; "" for builtin:sim.
	class string
	// disagrees is set when an engine's /tokenize gave other tokens for
	// the startup probes: the model then routes without predictions.
	disagrees atomic.Bool
	// revealKeys has predictions carry their blocks' index.TokenKey, for
	// index.Reveal (index modes exact and auto). Set before use.
	revealKeys bool
}

// prediction is what the gateway knows of a request's prompt.
type prediction struct {
	tokens  int
	hashes  []blockhash.Hash
	keys    []uint64 // index.TokenKey of each full block's tokens, with revealKeys; else nil
	partial int      // 1 when the prompt ends in a partial block, which takes a slot of the engine's cache while computed
	// noRead: the engine computes the whole prompt whatever it holds
	// (prompt logprobs), so every replica is predicted to hold none of it;
	// its blocks are still recorded where it goes, as the engine stores them.
	noRead   bool
	salted   bool           // its body has a cache_salt
	unsalted blockhash.Hash // with salted, its model's chain seed without the salt
}

// loadTokenizer resolves a model's tokenizer setting: builtin:sim, a
// directory holding tokenizer.json (and tokenizer_config.json), or a
// repository already in the local Hugging Face cache, org/name or
// org/name@revision. Nothing is downloaded.
// Repeated prompt pieces are kept tokenized, up to cacheTokens tokens.
func loadTokenizer(m *config.Model, cacheTokens int) (*modelTokenizer, error) {
	if m.Tokenizer == "" {
		return nil, nil
	}
	if m.Tokenizer == "builtin:sim" {
		return &modelTokenizer{tok: simTokenizer{simtok.New().WithCache(cacheTokens)}, blockSize: m.Blocks()}, nil
	}
	dir, name, err := tokenizerDir(m.Tokenizer)
	if err != nil {
		return nil, fmt.Errorf("tokenizer %q: %w", m.Tokenizer, err)
	}
	tok, err := hf.LoadAs(dir, name)
	if err != nil {
		return nil, fmt.Errorf("tokenizer %q: %w", m.Tokenizer, err)
	}
	tok = tok.WithCache(cacheTokens)
	chat, err := chattemplate.New(tok, chattemplate.Options{
		Template:      m.ChatTemplate,
		ContentFormat: m.ChatTemplateContentFormat,
		Kwargs:        json.RawMessage(m.ChatTemplateKwargs),
	})
	if err != nil {
		return nil, fmt.Errorf("tokenizer %q: %w", m.Tokenizer, err)
	}
	return &modelTokenizer{tok: hfTokenizer{hf: tok, chat: chat}, blockSize: m.Blocks(), class: tok.Class()}, nil
}

// maxRefBytes bounds a file under a cached repository's refs: it holds a
// commit's 40 hexadecimal digits.
const maxRefBytes = 4 << 10

var hubRepo = regexp.MustCompile(`^[A-Za-z0-9][\w.-]*/[\w.-]+(@[\w./-]+)?$`)

// tokenizerDir finds the directory a tokenizer setting names, and the name
// transformers loads it under: the directory, or the repository id (org/name)
// whose snapshot it is.
func tokenizerDir(setting string) (dir, name string, err error) {
	if st, err := os.Stat(setting); err == nil && st.IsDir() {
		return setting, setting, nil
	}
	if !hubRepo.MatchString(setting) || strings.HasPrefix(setting, ".") {
		return "", "", errors.New("no such directory, and not an org/name[@revision] repository")
	}
	repo, rev, _ := strings.Cut(setting, "@")
	if rev == "" {
		rev = "main"
	}
	root := hubCache()
	base := filepath.Join(root, "models--"+strings.ReplaceAll(repo, "/", "--"))
	// A branch or tag names a commit in refs; a commit has no file there.
	switch ref, err := filewatch.ReadFile(filepath.Join(base, "refs", rev), maxRefBytes); {
	case err == nil:
		rev = strings.TrimSpace(string(ref))
	case !errors.Is(err, fs.ErrNotExist):
		// A named pipe or a device there is refused rather than waited on
		// or read without end, as every file a tokenizer setting leads to.
		return "", "", fmt.Errorf("revision %s: %w", rev, err)
	}
	dir = filepath.Join(base, "snapshots", rev)
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
		return "", "", fmt.Errorf("not in the local Hugging Face cache (%s); nothing is downloaded", dir)
	}
	return dir, repo, nil
}

// hubCache is where the Hugging Face hub keeps repositories, as its client
// decides: HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub.
func hubCache() string {
	if d := os.Getenv("HF_HUB_CACHE"); d != "" {
		return d
	}
	if d := os.Getenv("HF_HOME"); d != "" {
		return filepath.Join(d, "hub")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "huggingface", "hub")
}

// TokenizerProblems lists, for inferrail-gateway --check and startup, the
// models that will route without cache predictions and why.
func TokenizerProblems(cfg *config.Config) []string {
	problems, _ := CheckTokenizers(cfg)
	return problems
}

// CheckTokenizers loads every model's tokenizer and says, for
// inferrail-gateway --check, which models will route without cache
// predictions and why (problems), and how the others' tokens are computed
// (loaded): the transformers class their tokenizer follows.
func CheckTokenizers(cfg *config.Config) (problems, loaded []string) {
	for i := range cfg.Models {
		m := &cfg.Models[i]
		t, err := loadTokenizer(m, 0)
		switch {
		case err != nil:
			problems = append(problems, fmt.Sprintf("model %s: %v; it routes without cache predictions", m.Name, err))
		case t == nil:
			problems = append(problems, fmt.Sprintf("model %s: no tokenizer; it routes without cache predictions", m.Name))
		case t.class == "":
			loaded = append(loaded, fmt.Sprintf("model %s: tokenizer %s", m.Name, m.Tokenizer))
		default:
			loaded = append(loaded, fmt.Sprintf("model %s: tokenizer %s, as transformers' %s builds it", m.Name, m.Tokenizer, t.class))
		}
		if hft, ok := t.tokOrNil().(hfTokenizer); ok {
			for _, p := range hft.chat.Problems() {
				problems = append(problems, fmt.Sprintf("model %s: %s; its chat requests that use it route without cache predictions", m.Name, p))
			}
		}
	}
	return problems, loaded
}

// tokOrNil is t's tokenizer, nil for no modelTokenizer.
func (t *modelTokenizer) tokOrNil() promptTokenizer {
	if t == nil {
		return nil
	}
	return t.tok
}

// predict tokenizes the request's prompt and hashes its blocks, or says why
// it could not; nil means route without a prediction.
func (g *Gateway) predict(ex *exchange, chat bool) *prediction {
	mt := g.tokenizers[ex.model]
	if mt == nil {
		return nil
	}
	if mt.disagrees.Load() {
		ex.tokenized = tokDisagree
		g.metrics.tokenized.WithLabelValues(ex.model, tokDisagree).Inc()
		return nil
	}
	start := time.Now()
	pred, result, err := g.tokenizeAsRouted(ex, mt, chat)
	if errors.Is(err, tokenize.ErrPanicked) {
		// A defect of ours or of the template engine: the request still
		// routes, and the operator hears of it.
		g.log.Error("tokenizing a request failed; routed without a prediction", "model", ex.model, "request_id", ex.id, "error", err)
	}
	ex.tokenized = result
	g.metrics.tokenized.WithLabelValues(ex.model, result).Inc()
	g.metrics.tokenizeTime.WithLabelValues(ex.model).Observe(time.Since(start).Seconds())
	return pred
}

// tokenizeAsRouted tokenizes the request's prompt as routing does: a small
// body inline, a larger one on the tokenizer pool for at most
// tokenizer.max_wait, so that a full or slow pool leaves the request
// without a prediction (busy, slow). Routing and its explanation both call
// it, so an explanation is offered what routing would be. It returns the
// prediction (nil without one), what became of the tokenizing, and the
// run's error.
func (g *Gateway) tokenizeAsRouted(ex *exchange, mt *modelTokenizer, chat bool) (*prediction, string, error) {
	// The worker writes only into done, which is read after a nil error:
	// after ErrSlow the worker may still be tokenizing, and its late result
	// must not race with (or replace) the request's own.
	if ex.unreadable {
		// The prompt parsers would read the zeros standing in for NaN or
		// an infinity, which the engine renders otherwise.
		return nil, tokUnsupported, nil
	}
	var done struct {
		pred   *prediction
		result string
	}
	// A worker whose request stopped waiting (tokenizer.max_wait) is told
	// to stop, so a prompt that takes seconds to tokenize does not keep
	// it from the requests behind.
	contextLen := func() int { return g.contextLen(ex.model) }
	work := func(stop *atomic.Bool) {
		done.pred, done.result = tokenizeBody(mt, ex.model, ex.parseable(), chat, contextLen, stop)
	}
	var err error
	if len(ex.parseable()) <= inlineBytes {
		err = tokenize.Run(work, nil)
	} else {
		err = g.tokPool.Do(time.Duration(g.cfg.Tokenizer.MaxWait), work)
	}
	switch {
	case err == nil:
		return done.pred, done.result, nil
	case errors.Is(err, tokenize.ErrBusy):
		return nil, tokBusy, err
	case errors.Is(err, tokenize.ErrPanicked):
		return nil, tokUnavailable, err
	}
	return nil, tokSlow, err
}

// reveal shows replica id's mirror a prompt routed there, with the keys of
// its blocks' tokens (index.Reveal), and a salted prompt's first block
// (index.SaltedRoot). Without keys (the approximate index) it does nothing.
func (g *Gateway) reveal(id string, pred *prediction) {
	if pred.keys == nil {
		return
	}
	g.index.Reveal(id, pred.hashes, pred.keys)
	if pred.salted && len(pred.keys) > 0 {
		g.index.SaltedRoot(id, pred.keys[0], pred.hashes[0], pred.unsalted)
	}
}

// contextLen is the context length of model's engines that every one
// serving it holds to (engineCard's max_model_len), 0 when none said.
func (g *Gateway) contextLen(model string) int {
	var n int
	if card := engineCard(g.fleet.Snapshot().ForModel(model), model); card != nil && json.Unmarshal(card["max_model_len"], &n) == nil {
		return n
	}
	return 0
}

// tokenizeBody computes a request's prompt tokens and block hashes.
// contextLen gives the model's context length (0 unknown), read only for
// a prompt with truncate_prompt_tokens.
func tokenizeBody(mt *modelTokenizer, model string, body []byte, chat bool, contextLen func() int, stop *atomic.Bool) (*prediction, string) {
	var p *tokenize.Prompt
	var err error
	if chat {
		p, err = tokenize.ParseChatRequest(body)
	} else {
		p, err = tokenize.ParseCompletionRequest(body)
	}
	if err != nil {
		return nil, tokResult(err)
	}
	if stop != nil && stop.Load() {
		return nil, tokSlow
	}
	ids, err := mt.tok.PromptIDs(p, stop)
	if err != nil {
		return nil, tokResult(err)
	}
	if p.HasTruncate && p.Cuts(len(ids), contextLen()) {
		return nil, tokUnsupported // truncate_prompt_tokens: the engine sees other tokens
	}
	seed := blockhash.Seed(model, "", p.CacheSalt)
	pred := &prediction{tokens: len(ids), hashes: blockhash.Extend(nil, seed, ids, mt.blockSize), noRead: p.SkipsCache}
	if p.CacheSalt != "" {
		pred.salted, pred.unsalted = true, blockhash.Seed(model, "", "")
	}
	if len(ids)%mt.blockSize != 0 {
		pred.partial = 1
	}
	if mt.revealKeys {
		pred.keys = blockKeys(ids, mt.blockSize)
	}
	return pred, tokOK
}

// blockKeys returns the index.TokenKey of each full block of ids.
func blockKeys(ids []int, blockSize int) []uint64 {
	keys := make([]uint64, len(ids)/blockSize)
	block := make([]uint32, blockSize)
	for i := range keys {
		for j, id := range ids[i*blockSize : (i+1)*blockSize] {
			block[j] = uint32(id)
		}
		keys[i] = index.TokenKey(block)
	}
	return keys
}

// tokResult is the result a request that got no prediction is counted
// under, by why.
func tokResult(err error) string {
	var ue *tokenize.UnsupportedError
	var te *chattemplate.Error
	switch {
	case errors.Is(err, hf.ErrStopped):
		return tokSlow
	case errors.As(err, &ue) && ue.Reason == tokenize.ReasonTemplate, errors.As(err, &te):
		return tokTemplate
	case errors.As(err, &ue):
		return tokUnsupported
	case errors.Is(err, chattemplate.ErrMissing):
		return tokUnavailable
	}
	return tokInvalid
}

// cachedTokens predicts, for each replica id, how many of the prompt's
// tokens its engine holds.
func (g *Gateway) cachedTokens(dst []int, ids []string, model string, pred *prediction) []int {
	if pred.noRead {
		return append(dst[:0], make([]int, len(ids))...)
	}
	bs := g.tokenizers[model].blockSize
	cached := blocksToTokens(g.index.Match(dst, ids, pred.hashes, pred.tokens, bs), bs)
	if g.scraper != nil {
		for i, id := range ids {
			cached[i] = pageFloor(cached[i], g.scraper.Last(id))
		}
	}
	return cached
}

// pageFloor rounds a replica's predicted cached tokens down to whole pages
// of its engine, as its last sample (smp, nil when none) reports them:
// SGLang matches its radix cache a page at a time, so where its pages are
// larger than the model's blocks the last part-page of a prefix is no hit
// (a review's finding: with pages of 64 and blocks of 16, predictions ran
// up to 48 tokens ahead of SGLang's hits). vLLM's reported block size need
// not be the size its prefix cache hashes (see wrongBlockSize), so a vLLM
// engine's prediction is left as it is.
func pageFloor(cached int, smp *load.Sample) int {
	if smp == nil || smp.Report == nil || smp.Report.Engine != load.SGLang || smp.Report.BlockSize <= 1 {
		return cached
	}
	page := smp.Report.BlockSize
	return cached / page * page
}

func blocksToTokens(blocks []int, blockSize int) []int {
	for i := range blocks {
		blocks[i] *= blockSize
	}
	return blocks
}

// learnCapacity sizes a replica's shadow cache from what its engine
// reports, unless the config set it: in the gateway's blocks, as the
// scraper counts it (load.Report.UsableBlocks), and at most
// index.MaxMirrorBlocks: on its engine's word alone, a replica's index
// takes no more of the gateway's memory than that.
func (g *Gateway) learnCapacity(id string) {
	r := g.fleet.Snapshot().Get(id)
	if r == nil || r.KVCapacityBlocks > 0 {
		return
	}
	smp := g.scraper.Last(id)
	if smp == nil || smp.CapacityBlocks <= 0 {
		return
	}
	blocks := min(smp.CapacityBlocks, index.MaxMirrorBlocks)
	if prev, ok := g.learned.Load(id); ok && prev.(int) == blocks {
		return
	}
	g.learned.Store(id, blocks)
	g.index.SetCapacity(id, blocks)
	if g.fleet.Snapshot().Get(id) != r {
		// It left meanwhile, and the index ignored the capacity: the
		// watcher may have cleared learned before the store, and a replica
		// of its ID must learn its own.
		g.learned.Delete(id)
	}
}

// indexSummary is GET /admin/index.
type indexSummary struct {
	Mode          string           `json:"mode"`
	Entries       int              `json:"entries"`
	Bytes         int64            `json:"bytes"`
	BytesPerEntry float64          `json:"bytes_per_entry"`
	Replicas      []indexedReplica `json:"replicas"`
	// KVEvents is every followed engine stream (modes exact and auto).
	KVEvents []kvStatus `json:"kv_events,omitempty"`
	// Predictions are the checks of predictions against engine usage.
	Predictions []driftStatus `json:"predictions"`
	// Tokenization is every model's startup comparison with an engine's
	// /tokenize.
	Tokenization []tokenCheck `json:"tokenization"`
}

type indexedReplica struct {
	ID       string       `json:"id"`
	Held     int          `json:"blocks"`
	Capacity int          `json:"capacity_blocks"`
	Source   index.Source `json:"source"`
}

func summarize(st index.Stats) indexSummary {
	s := indexSummary{Entries: st.Entries, Bytes: st.Bytes, Replicas: []indexedReplica{}}
	if st.Entries > 0 {
		s.BytesPerEntry = float64(st.Bytes) / float64(st.Entries)
	}
	for _, r := range st.Replicas {
		s.Replicas = append(s.Replicas, indexedReplica{ID: r.ID, Held: r.Held, Capacity: r.Capacity, Source: r.Source})
	}
	return s
}

// hexBlocks renders block hashes for the admin API.
func hexBlocks(hs []blockhash.Hash) []string {
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = h.String()
	}
	return out
}

// isChatPath reports whether an OpenAI path is the chat endpoint.
func isChatPath(path string) bool { return strings.HasSuffix(path, "/chat/completions") }
