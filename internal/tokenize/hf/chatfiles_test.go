package hf

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestChatTemplateFiles checks that template files beside
// tokenizer_config.json take the place of its chat_template as
// transformers loads them: chat_template.jinja as the default,
// additional_chat_templates/NAME.jinja as named ones.
func TestChatTemplateFiles(t *testing.T) {
	const inConfig = `{"tokenizer_class": "PreTrainedTokenizerFast", "chat_template": "from the config", "bos_token": "<s>"}`
	tests := []struct {
		name   string
		config string            // tokenizer_config.json, "" for none
		files  map[string]string // path under the directory → content
		want   string            // the Template as JSON, "null" for none; "nil" for no ChatConfig
	}{
		{"config only", inConfig, nil, `"from the config"`},
		{"neither", `{"tokenizer_class": "PreTrainedTokenizerFast"}`, nil, `null`},
		{"nothing at all", "", nil, `nil`},
		{"default file wins", inConfig, map[string]string{"chat_template.jinja": "{{ x }}\n"}, `"{{ x }}\n"`},
		{"default file without a config", "", map[string]string{"chat_template.jinja": "d"}, `"d"`},
		{"named files", inConfig, map[string]string{"chat_template.jinja": "d", "additional_chat_templates/tool_use.jinja": "t", "additional_chat_templates/rag.jinja": "r"},
			`[{"name":"default","template":"d"},{"name":"rag","template":"r"},{"name":"tool_use","template":"t"}]`},
		{"named without a default", inConfig, map[string]string{"additional_chat_templates/tool_use.jinja": "t"}, `[{"name":"tool_use","template":"t"}]`},
		{"the directory's default wins", inConfig, map[string]string{"chat_template.jinja": "d", "additional_chat_templates/default.jinja": "dd"}, `"dd"`},
		{"other files ignored", inConfig, map[string]string{"additional_chat_templates/notes.txt": "n", "chat_template.json": `{"chat_template": "p"}`}, `"from the config"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if tt.config != "" {
				writeFile(t, filepath.Join(dir, "tokenizer_config.json"), tt.config)
			}
			for p, c := range tt.files {
				writeFile(t, filepath.Join(dir, p), c)
			}
			cc, err := LoadChatConfig(dir)
			if err != nil {
				t.Fatal(err)
			}
			if cc == nil {
				if tt.want != "nil" {
					t.Fatalf("no ChatConfig, want template %s", tt.want)
				}
				return
			}
			got := string(cc.Template)
			if cc.Template == nil {
				got = "null"
			}
			if got != tt.want {
				t.Errorf("template %s, want %s", got, tt.want)
			}
			if tt.config == inConfig && (len(cc.SpecialTokens) == 0 || cc.SpecialTokens[0].Content != "<s>") {
				t.Errorf("special tokens %v, want bos_token <s> from the config", cc.SpecialTokens)
			}
		})
	}
}

// TestLoadReadsTemplateFiles checks that Load, not only LoadChatConfig,
// gives the tokenizer the template files, and names an unreadable one.
func TestLoadReadsTemplateFiles(t *testing.T) {
	src := familyDir(t, "llama3_2")
	dir := t.TempDir()
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, f), string(b))
	}
	writeFile(t, filepath.Join(dir, "chat_template.jinja"), "{% for m in messages %}{{ m.content }}{% endfor %}")
	tok, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got string
	if err := json.Unmarshal(tok.ChatConfig().Template, &got); err != nil || got != "{% for m in messages %}{{ m.content }}{% endfor %}" {
		t.Errorf("template %s (%v), want the file's", tok.ChatConfig().Template, err)
	}
	if err := os.Mkdir(filepath.Join(dir, chatTemplateDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, chatTemplateDir, "broken.jinja"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); err != nil {
		t.Errorf("a directory named like a template is skipped, got %v", err)
	}
	writeFile(t, filepath.Join(dir, chatTemplateDir, "x.jinja"), "x")
	if err := os.Chmod(filepath.Join(dir, chatTemplateDir, "x.jinja"), 0); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() != 0 { // root reads it anyway
		if _, err := Load(dir); err == nil {
			t.Error("an unreadable template file loaded")
		}
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestSpecialTokensMap: a tokenizer_config.json without
// added_tokens_decoder (written before transformers 4.34) takes its special
// tokens from special_tokens_map.json beside it, as transformers loads
// them; a newer one ignores that file. The ids are transformers 5.17.0's
// for the same files.
func TestSpecialTokensMap(t *testing.T) {
	const stmap = `{"bos_token": {"content": "<s>", "lstrip": false, "normalized": false, "rstrip": false, "single_word": false},
		"eos_token": "</s>", "unk_token": null, "additional_special_tokens": ["<x>", "<y>"]}`
	legacy := `{"tokenizer_class": "LlamaTokenizerFast", "add_eos_token": true, "bos_token": "<unk>", "eos_token": "<unk>", "unk_token": "<unk>", "additional_special_tokens": ["<y>"]}`
	current := `{"tokenizer_class": "LlamaTokenizerFast", "add_eos_token": true, "bos_token": "<unk>", "eos_token": "<unk>", "unk_token": "<unk>", "added_tokens_decoder": {}}`
	for _, tt := range []struct {
		name, config string
		want         []SpecialToken
	}{
		{"legacy", legacy, []SpecialToken{{"bos_token", "<s>"}, {"eos_token", "</s>"}}},
		{"current", current, []SpecialToken{{"bos_token", "<unk>"}, {"eos_token", "<unk>"}, {"unk_token", "<unk>"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, filepath.Join(dir, "tokenizer_config.json"), tt.config)
			writeFile(t, filepath.Join(dir, "special_tokens_map.json"), stmap)
			cc, err := LoadChatConfig(dir)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(cc.SpecialTokens, tt.want) {
				t.Errorf("special tokens %v, want %v", cc.SpecialTokens, tt.want)
			}
		})
	}
	// BOS comes from tokenizer.json's post-processor: transformers 5 ignores
	// add_eos_token beside a tokenizer.json (4.x rebuilt it, adding </s>).
	dir := t.TempDir()
	b, err := os.ReadFile(filepath.Join(familyDir(t, "llama2"), "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "tokenizer.json"), string(b))
	writeFile(t, filepath.Join(dir, "tokenizer_config.json"), legacy)
	writeFile(t, filepath.Join(dir, "special_tokens_map.json"), stmap)
	tok, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tok.Encode(nil, "hi", true), []int{1, 12014}; !slices.Equal(got, want) {
		t.Errorf("Encode(hi) with special tokens = %v, want %v", got, want)
	}
	// The config's additional special token <y> is added (id 32000); the
	// map's <x> is not: transformers 5 reads the map's list under its new
	// name, extra_special_tokens, only.
	if got, want := tok.Encode(nil, "<x> <y>", false), []int{523, 28744, 28767, 28705, 32000}; !slices.Equal(got, want) {
		t.Errorf("Encode(<x> <y>) = %v, want %v", got, want)
	}
	writeFile(t, filepath.Join(dir, "special_tokens_map.json"), `{"bos_token": [1]}`)
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "special_tokens_map.json: bos_token") {
		t.Errorf("a malformed map: %v, want an error naming the file and key", err)
	}
}
