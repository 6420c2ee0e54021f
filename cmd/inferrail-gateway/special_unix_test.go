//go:build unix

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/filewatch/filewatchtest"
)

// TestCheckTokenizerNotAFile: --check of a config whose tokenizer.json is a
// named pipe, or whose chat template links to /dev/zero, ends at once and
// notes the file; it says "valid" only once the tokenizers have loaded. It
// used to print "valid" and then wait for the pipe's writer forever, or
// read /dev/zero until memory ran out (a review's finding).
func TestCheckTokenizerNotAFile(t *testing.T) {
	dir := t.TempDir()
	fifoDir := filepath.Join(dir, "tok")
	if err := os.Mkdir(fifoDir, 0o755); err != nil {
		t.Fatal(err)
	}
	kinds := filewatchtest.Specials(t)
	if len(kinds) < 2 {
		t.Skip("needs both a named pipe and /dev/zero")
	}
	fifo, zero := filepath.Join(fifoDir, "tokenizer.json"), filepath.Join(dir, "chat.jinja")
	if err := errors.Join(kinds[0].Make(fifo), kinds[1].Make(zero)); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		model string // the models[] entry
		note  string // what --check notes
	}{
		{"fifo_tokenizer", fmt.Sprintf("{name: m, tokenizer: %q}", fifoDir), fifo + ": a named pipe, not a file"},
		{"dev_zero_chat_template", fmt.Sprintf("{name: m, tokenizer: ../../.cache/tokenizers/llama2, chat_template: %q}", zero), zero + ": not a regular file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "gateway.yaml")
			yaml := "models: [" + tt.model + "]\nreplicas: [{id: r, url: 'http://127.0.0.1:1', models: [m]}]\n"
			if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			var out, errOut bytes.Buffer
			err := filewatchtest.Within(t, 20*time.Second, func() error {
				return run(context.Background(), []string{"--check", "--config", path}, &out, &errOut)
			})
			if got := out.String(); err != nil || !strings.Contains(got, "valid (1 models") || !strings.Contains(got, tt.note) {
				t.Errorf("--check: %v, printed %q; want valid, and a note with %q", err, got, tt.note)
			}
		})
	}
}
