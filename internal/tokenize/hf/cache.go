package hf

import "github.com/inferrail/inferrail/internal/tokenize/piececache"

// WithCache returns a tokenizer that encodes as t does and keeps the ids of
// the pieces it encodes, up to maxTokens tokens in all, for the next request
// that repeats them (package piececache). Its pieces are the texts between
// two added tokens matched before normalization (as <|im_start|> and
// <|im_end|>) that are at least 64 bytes long: a shared system prompt, an
// earlier turn of a chat. Everything after that first split (the normalizer,
// added tokens matched after it, the pre-tokenizers and the model) sees one
// such text at a time, and only Metaspace's prepend_scheme "first" looks at
// where it is, so a piece that begins the text is cached apart from the same
// text elsewhere. With maxTokens <= 0 the result has no cache.
//
// The cache is split into up to 16 shards of at least 65,536 tokens, each
// evicting what was not used for longest (roughly: CLOCK); a piece of more
// than a quarter of a shard (65,536 tokens at the default 4,194,304) is not
// kept. For English text it takes about 8 bytes per token kept: the ids and
// a copy of the text.
//
// The result shares t's vocabulary and the word cache of its BPE model, but
// not its piece cache: each call makes a new, empty one.
func (t *Tokenizer) WithCache(maxTokens int) *Tokenizer {
	c := *t
	c.pieces = piececache.New(maxTokens)
	return &c
}

// CacheStats returns how many pieces Encode found in the piece cache (hits)
// and how many it had to encode (misses) since WithCache. Pieces too short
// to cache are not counted; without a cache both are 0.
func (t *Tokenizer) CacheStats() (hits, misses uint64) { return t.pieces.Stats() }
