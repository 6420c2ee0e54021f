//go:build unix

package hf

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/filewatch/filewatchtest"
)

// TestLoadRefusesWhatIsNotAFile: a named pipe, or a symlink to /dev/zero,
// in place of any file Load reads is refused at once, with an error naming
// it. Load used to wait forever for the pipe's writer, and read /dev/zero
// until memory ran out, which kept the gateway from serving and from
// stopping (a review's finding).
func TestLoadRefusesWhatIsNotAFile(t *testing.T) {
	kinds := filewatchtest.Specials(t)
	files := []string{
		"tokenizer.json",
		"tokenizer_config.json",
		"config.json",
		"special_tokens_map.json",
		"added_tokens.json",
		chatTemplateFile,
		chatTemplateDir,
		filepath.Join(chatTemplateDir, "tool_use.jinja"),
	}
	for _, kind := range kinds {
		for _, file := range files {
			t.Run(kind.Name+"/"+strings.ReplaceAll(file, "/", "_"), func(t *testing.T) {
				dir := t.TempDir()
				writeFile(t, filepath.Join(dir, "tokenizer.json"), tinyTokenizer)
				// No added_tokens_decoder: special_tokens_map.json and
				// added_tokens.json are read too.
				writeFile(t, filepath.Join(dir, "tokenizer_config.json"), `{"tokenizer_class": "PreTrainedTokenizerFast"}`)
				if strings.HasPrefix(file, chatTemplateDir+"/") {
					if err := os.Mkdir(filepath.Join(dir, chatTemplateDir), 0o755); err != nil {
						t.Fatal(err)
					}
				}
				path := filepath.Join(dir, file)
				if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
					t.Fatal(err)
				}
				if err := kind.Make(path); err != nil {
					t.Fatal(err)
				}
				err := filewatchtest.Within(t, 10*time.Second, func() error {
					_, err := Load(dir)
					return err
				})
				if err == nil || !strings.Contains(err.Error(), path) {
					t.Errorf("Load with %s a %s: %v, want an error naming it", file, kind.Name, err)
				}
				// The directory of templates is refused by os.ReadDir
				// (ENOTDIR: it opens with O_DIRECTORY, which never
				// waits on a pipe), not by filewatch.ReadFile.
				if file != chatTemplateDir && !errors.Is(err, kind.Want) {
					t.Errorf("Load with %s a %s: %v, want %v", file, kind.Name, err, kind.Want)
				}
			})
		}
	}
}
