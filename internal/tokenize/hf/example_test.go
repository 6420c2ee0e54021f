package hf_test

import (
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/inferrail/inferrail/internal/tokenize/hf"
)

func ExampleLoad() {
	// A directory as a model repository has it: tokenizer.json (whose
	// post-processor adds BOS when special tokens are asked for), and
	// tokenizer_config.json naming the transformers class (here the generic
	// one, which takes tokenizer.json as it is).
	dir, err := os.MkdirTemp("", "tokenizer")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	tokenizerJSON := `{"version":"1.0","added_tokens":[
	  {"id":0,"content":"<s>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}],
	 "normalizer":null,"pre_tokenizer":{"type":"Split","pattern":{"String":" "},"behavior":"MergedWithNext","invert":false},
	 "post_processor":{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>","type_id":0}},{"Sequence":{"id":"A","type_id":0}}],
	   "pair":[{"Sequence":{"id":"A","type_id":0}},{"Sequence":{"id":"B","type_id":1}}],
	   "special_tokens":{"<s>":{"id":"<s>","ids":[0],"tokens":["<s>"]}}},
	 "decoder":{"type":"Fuse"},
	 "model":{"type":"BPE","vocab":{"<s>":0,"a":1,"b":2," ":3,"ab":4," ab":5},"merges":[["a","b"],[" ","ab"]]}}`
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), []byte(tokenizerJSON), 0o644); err != nil {
		log.Fatal(err)
	}
	config := `{"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>"}`
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(config), 0o644); err != nil {
		log.Fatal(err)
	}

	tok, err := hf.Load(dir)
	if err != nil {
		log.Fatal(err)
	}
	ids := tok.Encode(nil, "ab ab<s>ba", false)
	fmt.Println(ids)
	fmt.Println(tok.Encode(nil, "ab", true))
	fmt.Printf("%q\n", tok.Decode(ids))
	// Output:
	// [4 5 0 2 1]
	// [0 4]
	// "ab ab<s>ba"
}
