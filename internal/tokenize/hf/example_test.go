package hf_test

import (
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/inferrail/inferrail/internal/tokenize/hf"
)

func ExampleLoad() {
	// A directory as a model repository has it: tokenizer.json, and
	// tokenizer_config.json for the transformers class (here a Llama one,
	// which adds BOS when special tokens are asked for).
	dir, err := os.MkdirTemp("", "tokenizer")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	tokenizerJSON := `{"version":"1.0","added_tokens":[
	  {"id":0,"content":"<s>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}],
	 "normalizer":null,"pre_tokenizer":{"type":"Split","pattern":{"String":" "},"behavior":"MergedWithNext","invert":false},
	 "post_processor":null,"decoder":{"type":"Fuse"},
	 "model":{"type":"BPE","vocab":{"<s>":0,"a":1,"b":2," ":3,"ab":4," ab":5},"merges":[["a","b"],[" ","ab"]]}}`
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), []byte(tokenizerJSON), 0o644); err != nil {
		log.Fatal(err)
	}
	config := `{"tokenizer_class": "LlamaTokenizerFast", "bos_token": "<s>", "add_bos_token": true}`
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
