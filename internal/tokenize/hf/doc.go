// Package hf reads Hugging Face tokenizers, tokenizer.json and the
// tokenizer_config.json (and model config.json) beside it, and encodes text
// to the very token ids transformers 5's AutoTokenizer computes for the
// same directory, which is what vLLM uses (goldens in testdata, written by
// scripts/goldens/tokenizer_goldens.py). Which tokenizer class
// transformers builds, and so what it keeps of tokenizer.json, is chosen as
// AutoTokenizer chooses it (classes.go, with tables copied from
// transformers by scripts/goldens/tokenizer_classes.py). It implements the BPE model with
// the normalizers, pre-tokenizers, added tokens, post-processors and
// decoders the families in use need, and refuses any other component
// (ErrUnsupported) rather than approximate it: one wrong token shifts every
// later block hash. So too for the regexes of Split and Replace, which
// tokenizers runs on Oniguruma: the common ones have hand-written scanners
// (scan.go), the others run on regexp2 as translateRegex rewrites them to
// Oniguruma's meaning, or are refused (onig.go; goldens in
// testdata/regex.json.gz, written by scripts/goldens/regex_goldens.py). A
// tokenizer made by WithCache keeps the ids of the prompt pieces requests
// repeat (package piececache); ChatConfig is what chat templates (package
// chattemplate) read of tokenizer_config.json.
package hf
