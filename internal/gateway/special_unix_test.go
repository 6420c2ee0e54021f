//go:build unix

package gateway

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/filewatch/filewatchtest"
)

// TestTokenizerFilesNotFiles: a named pipe, or a symlink to /dev/zero, at
// any file a model's tokenizer settings lead to (its tokenizer.json, its
// chat template, the Hugging Face cache's refs file naming its revision)
// fails the tokenizer at once, with an error naming the file. The gateway
// used to wait forever for the pipe's writer, or read /dev/zero until
// memory ran out, while loading tokenizers at start: it never served and
// SIGTERM did not stop it (a review's finding).
func TestTokenizerFilesNotFiles(t *testing.T) {
	kinds := filewatchtest.Specials(t)
	const llama2Dir = "../../.cache/tokenizers/llama2"
	if _, err := os.Stat(filepath.Join(llama2Dir, "tokenizer.json")); err != nil {
		t.Fatalf("%v: run make tokenizers (make test does)", err)
	}
	llama2, err := filepath.Abs(llama2Dir)
	if err != nil {
		t.Fatal(err)
	}
	// Each place returns the model's settings with the special file made
	// at the path it returns.
	places := []struct {
		name  string
		setup func(t *testing.T) (m config.Model, path string)
	}{
		{"tokenizer_json", func(t *testing.T) (config.Model, string) {
			dir := t.TempDir()
			return config.Model{Name: "m", Tokenizer: dir}, filepath.Join(dir, "tokenizer.json")
		}},
		{"chat_template", func(t *testing.T) (config.Model, string) {
			path := filepath.Join(t.TempDir(), "chat.jinja")
			return config.Model{Name: "m", Tokenizer: llama2, ChatTemplate: path}, path
		}},
		{"hub_refs", func(t *testing.T) (config.Model, string) {
			hub := t.TempDir()
			t.Setenv("HF_HUB_CACHE", hub)
			refs := filepath.Join(hub, "models--org--name", "refs")
			if err := os.MkdirAll(refs, 0o755); err != nil {
				t.Fatal(err)
			}
			return config.Model{Name: "m", Tokenizer: "org/name"}, filepath.Join(refs, "main")
		}},
	}
	for _, kind := range kinds {
		for _, place := range places {
			t.Run(kind.Name+"/"+place.name, func(t *testing.T) {
				m, path := place.setup(t)
				if err := kind.Make(path); err != nil {
					t.Fatal(err)
				}
				err := filewatchtest.Within(t, 10*time.Second, func() error {
					_, err := loadTokenizer(&m, 0)
					return err
				})
				if !errors.Is(err, kind.Want) || !strings.Contains(err.Error(), path) {
					t.Errorf("loadTokenizer with %s a %s: %v, want %v naming it", path, kind.Name, err, kind.Want)
				}
			})
		}
	}
}
