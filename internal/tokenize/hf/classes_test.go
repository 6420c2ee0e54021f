package hf

import "testing"

// TestChooseClass follows AutoTokenizer's choice through its branches
// (transformers/models/auto/tokenization_auto.py); the synthetic goldens
// check the same choices against transformers itself where a directory
// name does not matter.
func TestChooseClass(t *testing.T) {
	tests := []struct {
		name, hub string
		model     *modelConfig
		want      string
	}{
		{"dir", "LlamaTokenizerFast", nil, "LlamaTokenizer"},
		{"dir", "PreTrainedTokenizerFast", nil, backendClass},
		{"dir", "", nil, backendClass},
		// A model type registering a generic class wins over a specific
		// Hub class; one registering a specific class wins only where the
		// Hub's is known to be wrong.
		{"dir", "LlamaTokenizerFast", &modelConfig{ModelType: "deepseek_v3"}, backendClass},
		{"dir", "LlamaTokenizerFast", &modelConfig{ModelType: "qwen2"}, "Qwen2Tokenizer"},
		{"dir", "LlamaTokenizerFast", &modelConfig{ModelType: "gemma3"}, "LlamaTokenizer"},
		{"dir", "LlamaTokenizerFast", &modelConfig{ModelType: "llama"}, "LlamaTokenizer"},
		{"dir", "PreTrainedTokenizerFast", &modelConfig{ModelType: "qwen3"}, backendClass},
		// Without a tokenizer_class: config.json's, else the model type's.
		{"dir", "", &modelConfig{ModelType: "qwen3", TokenizerClass: "GPT2TokenizerFast"}, "GPT2Tokenizer"},
		{"dir", "", &modelConfig{ModelType: "qwen3"}, "Qwen2Tokenizer"},
		{"dir", "", &modelConfig{ModelType: "no_such_type"}, backendClass},
		// Repository names transformers always loads as tokenizer.json is;
		// a local path with a prefix does not match.
		{"deepseek-ai/DeepSeek-R1-Distill-Llama-8B", "LlamaTokenizerFast", &modelConfig{ModelType: "llama"}, backendClass},
		{"/models/deepseek-ai/DeepSeek-R1-Distill-Llama-8B", "LlamaTokenizerFast", &modelConfig{ModelType: "llama"}, "LlamaTokenizer"},
		{"meta-llama/Llama-2-7b-hf", "LlamaTokenizer", nil, "LlamaTokenizer"},
	}
	for _, tt := range tests {
		if got := chooseClass(tt.name, tt.hub, tt.model); got != tt.want {
			t.Errorf("chooseClass(%q, %q, %+v) = %s, want %s", tt.name, tt.hub, tt.model, got, tt.want)
		}
	}
}
