//go:build unix

package gateway

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/filewatch"
)

// TestTokenizerFilesNotFiles: a named pipe, or a symlink to /dev/zero, at
// any file a model's tokenizer settings lead to (its tokenizer.json, its
// chat template, the Hugging Face cache's refs file naming its revision)
// fails the tokenizer at once, with an error naming the file. The gateway
// used to wait forever for the pipe's writer, or read /dev/zero until
// memory ran out, while loading tokenizers at start: it never served and
// SIGTERM did not stop it (a review's finding).
func TestTokenizerFilesNotFiles(t *testing.T) {
	if err := syscall.Mkfifo(filepath.Join(t.TempDir(), "fifo"), 0o600); err != nil {
		t.Skip("no FIFOs here:", err)
	}
	const llama2Dir = "../../.cache/tokenizers/llama2"
	if _, err := os.Stat(filepath.Join(llama2Dir, "tokenizer.json")); err != nil {
		t.Fatalf("%v: run make tokenizers (make test does)", err)
	}
	llama2, err := filepath.Abs(llama2Dir)
	if err != nil {
		t.Fatal(err)
	}
	kinds := []struct {
		name string
		make func(path string) error
		want error
	}{
		{"fifo", func(path string) error { return syscall.Mkfifo(path, 0o600) }, filewatch.ErrNamedPipe},
		{"dev_zero", func(path string) error { return os.Symlink("/dev/zero", path) }, filewatch.ErrNotRegular},
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
			t.Run(kind.name+"/"+place.name, func(t *testing.T) {
				if kind.name == "dev_zero" {
					if _, err := os.Stat("/dev/zero"); err != nil {
						t.Skip(err)
					}
				}
				m, path := place.setup(t)
				if err := kind.make(path); err != nil {
					t.Fatal(err)
				}
				done := make(chan error, 1)
				go func() {
					_, err := loadTokenizer(&m, 0)
					done <- err
				}()
				select {
				case err := <-done:
					if !errors.Is(err, kind.want) || !strings.Contains(err.Error(), path) {
						t.Errorf("loadTokenizer with %s a %s: %v, want %v naming it", path, kind.name, err, kind.want)
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("loadTokenizer with %s a %s still runs after 10 s", path, kind.name)
				}
			})
		}
	}
}
