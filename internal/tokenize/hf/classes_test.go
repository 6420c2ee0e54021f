package hf

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestChooseClass follows AutoTokenizer's choice through its branches
// (transformers/models/auto/tokenization_auto.py); the synthetic goldens
// check the same choices against transformers itself where a directory
// name does not matter.
func TestChooseClass(t *testing.T) {
	tests := []struct {
		name, hub string
		remote    bool
		model     *modelConfig
		want      string
	}{
		{"dir", "LlamaTokenizerFast", false, nil, "LlamaTokenizer"},
		{"dir", "PreTrainedTokenizerFast", false, nil, backendClass},
		{"dir", "", false, nil, backendClass},
		// A model type registering a generic class wins over a specific
		// Hub class; one registering a specific class wins only where the
		// Hub's is known to be wrong.
		{"dir", "LlamaTokenizerFast", false, &modelConfig{ModelType: "deepseek_v3"}, backendClass},
		{"dir", "LlamaTokenizerFast", false, &modelConfig{ModelType: "qwen2"}, "Qwen2Tokenizer"},
		{"dir", "LlamaTokenizerFast", false, &modelConfig{ModelType: "gemma3"}, "LlamaTokenizer"},
		{"dir", "LlamaTokenizerFast", false, &modelConfig{ModelType: "llama"}, "LlamaTokenizer"},
		{"dir", "PreTrainedTokenizerFast", false, &modelConfig{ModelType: "qwen3"}, backendClass},
		// Without a tokenizer_class: config.json's, else the model type's.
		{"dir", "", false, &modelConfig{ModelType: "qwen3", TokenizerClass: "GPT2TokenizerFast"}, "GPT2Tokenizer"},
		{"dir", "", false, &modelConfig{ModelType: "qwen3"}, "Qwen2Tokenizer"},
		{"dir", "", false, &modelConfig{ModelType: "no_such_type"}, backendClass},
		// Repository names transformers always loads as tokenizer.json is;
		// a local path with a prefix does not match.
		{"deepseek-ai/DeepSeek-R1-Distill-Llama-8B", "LlamaTokenizerFast", false, &modelConfig{ModelType: "llama"}, backendClass},
		{"/models/deepseek-ai/DeepSeek-R1-Distill-Llama-8B", "LlamaTokenizerFast", false, &modelConfig{ModelType: "llama"}, "LlamaTokenizer"},
		{"meta-llama/Llama-2-7b-hf", "LlamaTokenizer", false, nil, "LlamaTokenizer"},
		// A class transformers does not have reads tokenizer.json as it is;
		// one it has is built, supported here or not.
		{"dir", "FooTokenizer", false, nil, backendClass},
		{"dir", "BloomTokenizerFast", false, nil, backendClass},
		{"dir", "T5TokenizerFast", false, nil, "T5Tokenizer"},
		// Remote code (auto_map) is not run, except where transformers
		// skips it for a model type with a known wrong Hub class.
		{"dir", "ChatGLMTokenizer", true, nil, remoteCode},
		{"deepseek-ai/deepseek-coder-6.7b", "LlamaTokenizer", true, nil, remoteCode},
		{"dir", "InternLM2Tokenizer", true, &modelConfig{ModelType: "internlm2"}, backendClass},
	}
	for _, tt := range tests {
		if got := chooseClass(tt.name, tt.hub, tt.remote, tt.model); got != tt.want {
			t.Errorf("chooseClass(%q, %q, %v, %+v) = %s, want %s", tt.name, tt.hub, tt.remote, tt.model, got, tt.want)
		}
	}
}

// TestLoadModelConfigErrors: a config.json that is not a JSON object, or
// whose model_type is not a string, is refused with its name; one without
// a model type loads as if it were absent.
func TestLoadModelConfigErrors(t *testing.T) {
	for _, tt := range []struct{ config, err string }{
		{`{"model_type": 7}`, "config.json"},
		{`[1, 2`, "config.json"},
		{`{"architectures": ["X"]}`, ""},
	} {
		dir := t.TempDir()
		writeFile(t, filepath.Join(dir, "tokenizer.json"), tinyTokenizer)
		writeFile(t, filepath.Join(dir, "tokenizer_config.json"), `{"tokenizer_class": "LlamaTokenizerFast"}`)
		writeFile(t, filepath.Join(dir, "config.json"), tt.config)
		_, err := Load(dir)
		switch {
		case tt.err == "" && err != nil:
			t.Errorf("config.json %s: %v", tt.config, err)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("config.json %s: %v, want an error naming %s", tt.config, err, tt.err)
		}
	}
}
