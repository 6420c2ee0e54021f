package hf

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/inferrail/inferrail/internal/tokenize/piececache"
)

// Tokenizer is a Hugging Face tokenizer read from a tokenizer.json (and the
// configs beside it). It produces the token ids that transformers 5's
// AutoTokenizer computes for the same directory, which is what
// vLLM uses: tokenizer(text, add_special_tokens=...)["input_ids"].
//
// Supported: the BPE model (merge ranks, ignore_merges, byte_fallback,
// fuse_unk, unk_token), added tokens (single_word, lstrip, rstrip,
// normalized, special), the normalizers NFC, NFD, NFKC, NFKD, Prepend,
// Replace, Strip and Sequence, the pre-tokenizers Split, ByteLevel,
// Metaspace, Digits and Sequence, the post-processors TemplateProcessing,
// ByteLevel and Sequence, and the decoders ByteLevel, Metaspace, Replace,
// ByteFallback, Fuse, Strip and Sequence. Load refuses anything else with
// an error wrapping ErrUnsupported.
//
// An *Tokenizer is safe for concurrent use.
type Tokenizer struct {
	norm      normalizer     // nil: none
	pre       []preTokenizer // in order; ByteLevel, if any, last
	byteLevel bool           // the model's vocabulary is in raw bytes
	// firstScheme: a Metaspace pre-tokenizer prepends only to the text's
	// start (prepend_scheme "first"), so pieces carry their head.
	firstScheme bool
	model       *bpe
	added       *addedVocab
	// prefix and suffix are the ids the post-processor puts around the
	// text when special tokens are added.
	prefix, suffix []int
	dec            decoder // nil: tokens are joined with spaces

	chat  ChatConfig // from tokenizer_config.json, for chat templates
	class string     // the transformers class it follows; "" for bare tokenizer.json

	pieces  *piececache.Cache // nil: no piece cache (see WithCache)
	scratch *sync.Pool        // *encodeScratch; shared with the tokenizers WithCache makes
}

// encodeScratch holds the buffers of one Encode call.
type encodeScratch struct {
	spans, normSpans []span
	pieces, next     []piece
	split            splitScratch
	stop             *atomic.Bool // EncodeUntil's; nil never stops
}

// stopped reports whether the encoding was told to stop.
func (sc *encodeScratch) stopped() bool { return sc.stop != nil && sc.stop.Load() }

// Load reads dir/tokenizer.json and, if present, dir/tokenizer_config.json
// and dir/config.json, as LoadAs(dir, dir).
func Load(dir string) (*Tokenizer, error) { return LoadAs(dir, dir) }

// LoadAs reads dir/tokenizer.json and, if present, dir/tokenizer_config.json
// and the model's dir/config.json, and builds the tokenizer transformers 5
// builds when AutoTokenizer loads the directory under the given name (what
// the engine was given: the directory itself, or the repository id whose
// snapshot it is; a few repository names are special in transformers).
// Without either config it encodes as the tokenizers library alone does.
//
// transformers 5 picks a class from tokenizer_config.json's tokenizer_class
// and config.json's model_type (see chooseClass). The generic class takes
// tokenizer.json as it is; the Llama, Gemma, Qwen2, GPT-2, GPT-NeoX and
// Cohere classes keep its vocabulary, merges and post-processor and build
// the rest themselves, which for Llama differs from tokenizer.json. Either
// way tokenizer_config.json may add tokens (added_tokens_decoder, missing
// special tokens) and set split_special_tokens. Other classes are refused.
func LoadAs(dir, name string) (*Tokenizer, error) {
	data, err := readFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return nil, fmt.Errorf("load tokenizer: %w", err)
	}
	cfg, err := readConfig(dir)
	if err != nil {
		return nil, fmt.Errorf("load tokenizer: %w", err)
	}
	model, err := readModelConfig(dir)
	if err != nil {
		return nil, fmt.Errorf("load tokenizer: %w", err)
	}
	t, err := build(data, cfg, model, name)
	if err != nil {
		return nil, fmt.Errorf("load tokenizer %s: %w", dir, err)
	}
	if err := withTemplateFiles(&t.chat, dir); err != nil {
		return nil, err
	}
	return t, nil
}

// build builds the tokenizer transformers does from the bytes of
// tokenizer.json, the parsed tokenizer_config.json and config.json (either
// nil when absent), loaded under name.
func build(data []byte, cfg *config, model *modelConfig, name string) (*Tokenizer, error) {
	if cfg == nil && model != nil {
		cfg = &config{specials: map[string]*configToken{}, noDecoder: true}
	}
	if cfg == nil {
		return newTokenizer(data, nil, tokenizerClass{})
	}
	className := chooseClass(name, cfg.TokenizerClass, cfg.remoteTokenizer(), model)
	class, ok := tokenizerClasses[className]
	if !ok {
		return nil, unsupportedClass(className, cfg.TokenizerClass, model)
	}
	cfg.withDefaults(class.defaults)
	t, err := newTokenizer(data, cfg, class)
	if err != nil {
		return nil, err
	}
	t.class = className
	return t, nil
}

// newTokenizer builds a tokenizer from the bytes of tokenizer.json, the
// parsed tokenizer_config.json and the class transformers builds. Without a
// config (nil) it behaves as the bare tokenizers library; with one, as
// transformers.
func newTokenizer(data []byte, cfg *config, class tokenizerClass) (*Tokenizer, error) {
	f, err := readTokenizerJSON(data)
	if err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	if isNull(f.Model) {
		return nil, errors.New("model: missing")
	}
	m, err := readModel(f.Model)
	if err != nil {
		return nil, err
	}
	if cfg != nil && class.pipeline != nil {
		cfg.rebuild(&f, m, class.pipeline)
	}
	t := &Tokenizer{}
	if t.norm, err = newNormalizer("normalizer", f.Normalizer); err != nil {
		return nil, err
	}
	if t.pre, t.byteLevel, err = newPreTokenizers("pre_tokenizer", f.PreTokenizer); err != nil {
		return nil, err
	}
	t.firstScheme = slices.ContainsFunc(t.pre, func(p preTokenizer) bool {
		m, ok := p.(*metaspacePre)
		return ok && m.prepend == "first"
	})
	if t.model, err = newBPE(m, t.byteLevel); err != nil {
		return nil, err
	}
	if t.dec, err = newDecoder("decoder", f.Decoder); err != nil {
		return nil, err
	}

	if cfg != nil && cfg.legacyAdded != nil {
		cfg.mergeLegacyAdded(f.AddedTokens)
	}
	t.added = newAddedVocab()
	toks := make([]addedToken, len(f.AddedTokens))
	for i, a := range f.AddedTokens {
		toks[i] = addedToken{content: a.Content, singleWord: a.SingleWord, lstrip: a.LStrip,
			rstrip: a.RStrip, normalized: a.Normalized, special: a.Special}
	}
	t.added.add(toks, t.model.size, t.model.lookup, t.norm)
	if t.prefix, t.suffix, err = newPostProcessor("post_processor", f.PostProcessor); err != nil {
		return nil, err
	}
	if class.bare {
		t.prefix, t.suffix = nil, nil
	}
	if cfg != nil {
		if err := cfg.addTokens(t); err != nil {
			return nil, err
		}
		t.added.encodeSpecial = cfg.SplitSpecialTokens
		t.chat = cfg.chatConfig()
	}
	t.scratch = &sync.Pool{New: func() any { return new(encodeScratch) }}
	return t, nil
}

// Class is the transformers tokenizer class t follows (TokenizersBackend for
// tokenizer.json as it is), or "" for a directory without either config.
func (t *Tokenizer) Class() string { return t.class }

// Encode appends the ids of text to dst and returns the extended slice. With
// addSpecialTokens the post-processor's tokens (typically BOS) are added, as
// for a completion prompt; chat prompts are encoded without them.
//
// Text that is not valid UTF-8 is encoded as if each invalid byte were
// U+FFFD, which is how encoding/json decodes such bytes in a request.
func (t *Tokenizer) Encode(dst []int, text string, addSpecialTokens bool) []int {
	dst, _ = t.EncodeUntil(dst, text, addSpecialTokens, nil)
	return dst
}

// ErrStopped is EncodeUntil's error when it was told to stop.
var ErrStopped = errors.New("tokenize: stopped")

// EncodeUntil is Encode that gives up when stop is set, soon after (it
// looks between pre-tokenizer passes, between pre-tokens, and every few
// thousand characters and merges of a long one),
// returning ErrStopped and ids that mean nothing; nothing it did not
// finish is cached. A nil stop never stops: that is Encode.
func (t *Tokenizer) EncodeUntil(dst []int, text string, addSpecialTokens bool, stop *atomic.Bool) ([]int, error) {
	if !utf8.ValidString(text) {
		text = replaceInvalidUTF8(text)
	}
	if addSpecialTokens {
		dst = append(dst, t.prefix...)
	}
	sc := t.scratch.Get().(*encodeScratch)
	sc.stop = stop
	defer func() {
		sc.stop = nil
		t.scratch.Put(sc)
	}()
	sc.spans = t.added.findMatches(sc.spans[:0], text, t.added.raw)
	for _, sp := range sc.spans {
		if sc.stopped() {
			return dst, ErrStopped
		}
		if sp.id >= 0 {
			dst = append(dst, int(sp.id))
			continue
		}
		// What follows depends only on the segment's text and on
		// whether it starts the text: it is a piece (package piececache).
		seg, start := text[sp.start:sp.end], sp.start == 0
		if t.pieces == nil || len(seg) < piececache.MinBytes {
			dst = t.encodeSegment(dst, seg, start, sc)
			continue
		}
		key := t.pieces.Key(seg, start)
		var ok bool
		if dst, ok = t.pieces.AppendCached(dst, key, seg, start); ok {
			continue
		}
		n := len(dst)
		dst = t.encodeSegment(dst, seg, start, sc)
		if sc.stopped() {
			return dst, ErrStopped
		}
		t.pieces.Put(key, seg, start, dst[n:])
	}
	if sc.stopped() {
		return dst, ErrStopped
	}
	if addSpecialTokens {
		dst = append(dst, t.suffix...)
	}
	return dst, nil
}

// encodeSegment encodes text found between two raw added tokens (those
// matched before normalization): it normalizes it, cuts out the normalized
// added tokens, and pre-tokenizes and encodes the rest. start is true when
// the segment begins the text.
func (t *Tokenizer) encodeSegment(dst []int, seg string, start bool, sc *encodeScratch) []int {
	head := 0
	if start && t.firstScheme {
		_, head = utf8.DecodeRuneInString(seg)
	}
	switch {
	case t.norm != nil && head > 0:
		seg, head = t.norm.normalizeHead(seg, head)
	case t.norm != nil:
		seg = t.norm.normalize(seg)
	}
	sc.normSpans = t.added.findMatches(sc.normSpans[:0], seg, t.added.norm)
	for _, ns := range sc.normSpans {
		if ns.id >= 0 {
			dst = append(dst, int(ns.id))
			continue
		}
		dst = t.encodePiece(dst, piece{s: seg, head: head}.sub(ns.start, ns.end), sc)
	}
	return dst
}

// encodePiece pre-tokenizes one normalized stretch of text and runs the
// model on each pre-token.
func (t *Tokenizer) encodePiece(dst []int, p piece, sc *encodeScratch) []int {
	pieces := append(sc.pieces[:0], p)
	sc.split.stop = sc.stop
	for _, pt := range t.pre {
		if sc.stopped() { // a pass over a megabyte-long prompt takes a while
			break
		}
		next := sc.next[:0]
		for _, q := range pieces {
			next = pt.split(next, q, &sc.split)
		}
		pieces, sc.next = next, pieces
	}
	for _, q := range pieces {
		if sc.stopped() {
			break
		}
		dst = t.model.encode(dst, q.s, sc.stop)
	}
	sc.pieces = pieces
	return dst
}

// Decode returns the text of ids as tokenizers' decode does with
// skip_special_tokens=false. Ids outside the vocabulary are skipped.
func (t *Tokenizer) Decode(ids []int) string {
	toks := make([]string, 0, len(ids))
	for _, id := range ids {
		if id < 0 || id > 1<<31-1 {
			continue
		}
		if tok, ok := t.added.byID[int32(id)]; ok {
			if s, ok := t.added.decodeAs[int32(id)]; ok {
				toks = append(toks, s)
			} else {
				toks = append(toks, tok.content)
			}
			continue
		}
		if id < len(t.model.tokens) && t.model.tokens[id] != "" {
			toks = append(toks, t.model.tokens[id])
		}
	}
	if t.dec == nil {
		return strings.Join(toks, " ")
	}
	return strings.Join(t.dec.decodeChain(toks), "")
}

// TokenID returns the id of a token given as written in tokenizer.json (an
// added token, else a model vocabulary entry).
func (t *Tokenizer) TokenID(tok string) (int, bool) {
	if id, ok := t.added.byContent[tok]; ok {
		return int(id), true
	}
	id, ok := t.model.lookup(tok)
	return int(id), ok
}

// VocabSize is one past the largest token id, of the model's vocabulary
// and of the added tokens.
func (t *Tokenizer) VocabSize() int {
	n := len(t.model.tokens)
	for id := range t.added.byID {
		n = max(n, int(id)+1)
	}
	return n
}

// SpecialIDs returns the ids Encode puts before and after the text's own
// when it adds special tokens: the post-processor's, typically BOS.
func (t *Tokenizer) SpecialIDs() (prefix, suffix []int) {
	return slices.Clone(t.prefix), slices.Clone(t.suffix)
}

// AddedTokens returns the texts of the added tokens, special or not, in
// the order of their ids.
func (t *Tokenizer) AddedTokens() []string {
	ids := slices.Sorted(maps.Keys(t.added.byID))
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = t.added.byID[id].content
	}
	return out
}

// replaceInvalidUTF8 replaces each byte that is not part of a valid UTF-8
// sequence with U+FFFD.
func replaceInvalidUTF8(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			b.WriteString("\uFFFD")
		} else {
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// newPostProcessor returns the ids a post-processor adds before and after a
// single sequence.
func newPostProcessor(path string, raw json.RawMessage) (prefix, suffix []int, err error) {
	typ, err := componentType(raw)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	switch typ {
	case "":
		return nil, nil, nil
	case "ByteLevel":
		// It only adjusts offsets.
		var c byteLevelJSON
		if err := strictUnmarshal(raw, &c); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", path, err)
		}
		return nil, nil, nil
	case "Sequence":
		var c struct {
			Type       string            `json:"type"`
			Processors []json.RawMessage `json:"processors"`
		}
		if err := strictUnmarshal(raw, &c); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", path, err)
		}
		for i, sub := range c.Processors {
			p, s, err := newPostProcessor(fmt.Sprintf("%s.processors[%d]", path, i), sub)
			if err != nil {
				return nil, nil, err
			}
			// Each processor wraps what the previous ones produced.
			prefix = append(p, prefix...)
			suffix = append(suffix, s...)
		}
		return prefix, suffix, nil
	case "TemplateProcessing":
		return newTemplate(path, raw)
	}
	return nil, nil, fmt.Errorf("%s: post-processor type %q: %w", path, typ, ErrUnsupported)
}

// newTemplate reads a TemplateProcessing post-processor: the ids of its
// single template before and after the sequence.
func newTemplate(path string, raw json.RawMessage) (prefix, suffix []int, err error) {
	var c struct {
		Type          string            `json:"type"`
		Single        []json.RawMessage `json:"single"`
		Pair          []json.RawMessage `json:"pair"`
		SpecialTokens map[string]struct {
			ID     string   `json:"id"`
			IDs    []int    `json:"ids"`
			Tokens []string `json:"tokens"`
		} `json:"special_tokens"`
		// ByteLevel's options, left beside the template in some files
		// (Command R's); they do nothing here, and tokenizers ignores
		// them too.
		AddPrefixSpace *bool `json:"add_prefix_space"`
		TrimOffsets    *bool `json:"trim_offsets"`
		UseRegex       *bool `json:"use_regex"`
	}
	if err := strictUnmarshal(raw, &c); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	// tokenizers reads ids as u32 and refuses the file otherwise.
	for _, name := range slices.Sorted(maps.Keys(c.SpecialTokens)) {
		for i, id := range c.SpecialTokens[name].IDs {
			if id < 0 || int64(id) > math.MaxUint32 {
				return nil, nil, fmt.Errorf("%s.special_tokens[%q].ids[%d]: %d out of range", path, name, i, id)
			}
		}
	}
	seen := false
	for i, item := range c.Single {
		var it struct {
			SpecialToken *struct {
				ID     string `json:"id"`
				TypeID int    `json:"type_id"`
			} `json:"SpecialToken"`
			Sequence *struct {
				ID     string `json:"id"`
				TypeID int    `json:"type_id"`
			} `json:"Sequence"`
		}
		if err := strictUnmarshal(item, &it); err != nil {
			return nil, nil, fmt.Errorf("%s.single[%d]: %w", path, i, err)
		}
		switch {
		case it.Sequence != nil && it.SpecialToken == nil:
			if it.Sequence.ID != "A" || seen {
				return nil, nil, fmt.Errorf("%s.single[%d]: sequence %q: %w", path, i, it.Sequence.ID, ErrUnsupported)
			}
			seen = true
		case it.SpecialToken != nil && it.Sequence == nil:
			st, ok := c.SpecialTokens[it.SpecialToken.ID]
			if !ok {
				return nil, nil, fmt.Errorf("%s.single[%d]: special token %q not in special_tokens", path, i, it.SpecialToken.ID)
			}
			if seen {
				suffix = append(suffix, st.IDs...)
			} else {
				prefix = append(prefix, st.IDs...)
			}
		default:
			return nil, nil, fmt.Errorf("%s.single[%d]: want one of SpecialToken, Sequence", path, i)
		}
	}
	if !seen {
		return nil, nil, fmt.Errorf("%s.single: no Sequence A", path)
	}
	return prefix, suffix, nil
}
