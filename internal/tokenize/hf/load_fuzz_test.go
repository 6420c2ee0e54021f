package hf

import (
	"math"
	"slices"
	"testing"
)

// FuzzLoadTokenizer: tokenizer.json, tokenizer_config.json and the model
// type of config.json come from model directories the operator names, read
// when the gateway starts and reloads, so they are outside bytes. Any of
// them must be refused with an error or load a tokenizer whose id table is
// no larger than the file allows, that encodes any text the same way twice,
// into ids of its own vocabulary (special tokens off) between the
// post-processor's u32 ids (on), and decodes them, all without a panic.
func FuzzLoadTokenizer(f *testing.F) {
	components := []struct{ key, value string }{
		{"normalizer", `{"type":"Sequence","normalizers":[{"type":"NFC"},{"type":"Prepend","prepend":"▁"},{"type":"Replace","pattern":{"String":" "},"content":"▁"}]}`},
		{"normalizer", `{"type":"Strip","strip_left":true,"strip_right":false}`},
		{"pre_tokenizer", `{"type":"Sequence","pretokenizers":[{"type":"Digits","individual_digits":true},{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true}]}`},
		{"pre_tokenizer", `{"type":"Split","pattern":{"Regex":"\\p{N}{1,3}"},"behavior":"Isolated","invert":false}`},
		{"pre_tokenizer", `{"type":"Metaspace","replacement":"▁","prepend_scheme":"first","split":true}`},
		{"post_processor", `{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"a","type_id":0}},{"Sequence":{"id":"A","type_id":0}}],"pair":[],"special_tokens":{"a":{"id":"a","ids":[0],"tokens":["a"]}}}`},
		{"decoder", `{"type":"Sequence","decoders":[{"type":"Replace","pattern":{"String":"▁"},"content":" "},{"type":"ByteFallback"},{"type":"Fuse"},{"type":"Strip","content":" ","start":1,"stop":0}]}`},
		{"added_tokens", `[{"id":4,"content":"<s>","single_word":false,"lstrip":true,"rstrip":false,"normalized":false,"special":true}]`},
		{"model", `{"type":"BPE","unk_token":"c","byte_fallback":true,"fuse_unk":true,"vocab":{"a":0,"b":1,"ab":2,"c":3,"<0x41>":4},"merges":[["a","b"]]}`},
	}
	configs := []string{
		``,
		`{"tokenizer_class":"LlamaTokenizerFast","add_bos_token":true,"add_eos_token":true,"bos_token":"a","eos_token":{"content":"b","special":true}}`,
		`{"tokenizer_class":"PreTrainedTokenizerFast","added_tokens_decoder":{"9":{"content":"<x>","special":true,"lstrip":true}},"additional_special_tokens":["<y>"],"split_special_tokens":true}`,
		`{"tokenizer_class":"GPT2TokenizerFast","add_prefix_space":true,"extra_special_tokens":{"image_token":"<img>"}}`,
		`{"tokenizer_class":"GemmaTokenizerFast","extra_special_tokens":["<e>"],"image_token":"<i>","legacy":false}`,
		`{"tokenizer_class":"Qwen2TokenizerFast","auto_map":{"AutoTokenizer":["a.B",null]}}`,
	}
	modelTypes := []string{"", "llama", "qwen2", "deepseek_v3", "cohere", "gpt_neox"}
	for i, c := range components {
		f.Add(withComponent(f, c.key, c.value), []byte(configs[i%len(configs)]), modelTypes[i%len(modelTypes)], "ab cab  A1234 <s>é")
		// And with no tokenizer_config.json: a config the component's file
		// does not suit (Gemma's unk_token, Qwen's remote code) refuses
		// the pair, and the component would never load.
		f.Add(withComponent(f, c.key, c.value), []byte(nil), "", "ab cab  A1234 <s>é")
	}
	f.Add([]byte(tinyTokenizer), []byte(configs[1]), "", "abc")
	f.Add(withComponent(f, "model", `{"type":"BPE","vocab":{"a":0,"b":1073741824},"merges":[]}`), []byte(``), "", "ab")
	f.Add(withComponent(f, "post_processor", `{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"S","type_id":0}},{"Sequence":{"id":"A","type_id":0}}],"pair":[],"special_tokens":{"S":{"id":"S","ids":[-5],"tokens":["a"]}}}`), []byte(``), "", "ab")
	f.Add([]byte(stopTokenizerJSON), []byte(``), "llama", "a b <s> c")
	f.Fuzz(func(t *testing.T, tokenizerJSON, configJSON []byte, modelType, text string) {
		if len(tokenizerJSON) > 1<<14 || len(configJSON) > 1<<12 || len(text) > 1<<10 {
			return
		}
		var cfg *config
		if len(configJSON) > 0 {
			c, err := parseConfig(configJSON)
			if err != nil {
				return
			}
			cfg = c
		}
		var model *modelConfig
		if modelType != "" {
			model = &modelConfig{ModelType: modelType}
		}
		tok, err := build(tokenizerJSON, cfg, model, "fuzz")
		if err != nil {
			return
		}
		// Ids index a dense table: its size must follow the file's, or one
		// large id would allocate gigabytes (and kill the gateway).
		if n := len(tok.model.tokens); n > 2*len(tokenizerJSON)+1<<11 {
			t.Fatalf("a %d-byte tokenizer.json loads a %d-entry id table", len(tokenizerJSON), n)
		}
		ids := tok.Encode(nil, text, false)
		if again := tok.Encode(nil, text, false); !slices.Equal(again, ids) {
			t.Fatalf("Encode(%q) gave %v, then %v", text, ids, again)
		}
		for _, id := range ids {
			if id < 0 || id >= tok.VocabSize() {
				t.Fatalf("Encode(%q) = %v: id %d outside the vocabulary (%d)", text, ids, id, tok.VocabSize())
			}
		}
		// With special tokens, the post-processor's ids go around them;
		// tokenizers holds those as u32.
		prefix, suffix := tok.SpecialIDs()
		special := tok.Encode(nil, text, true)
		if want := slices.Concat(prefix, ids, suffix); !slices.Equal(special, want) {
			t.Fatalf("Encode(%q, special) = %v, want %v", text, special, want)
		}
		for _, id := range slices.Concat(prefix, suffix) {
			if id < 0 || int64(id) > math.MaxUint32 {
				t.Fatalf("special id %d is not a u32", id)
			}
		}
		_ = tok.Decode(ids)
		_ = tok.Decode(special)
	})
}
