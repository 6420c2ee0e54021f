//go:build unix

package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
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
	fifo := filepath.Join(fifoDir, "tokenizer.json")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skip("no FIFOs here:", err)
	}
	zero := filepath.Join(dir, "chat.jinja")
	if err := os.Symlink("/dev/zero", zero); err != nil {
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
			if strings.HasPrefix(tt.name, "dev_zero") {
				if _, err := os.Stat("/dev/zero"); err != nil {
					t.Skip(err)
				}
			}
			path := filepath.Join(t.TempDir(), "gateway.yaml")
			yaml := "models: [" + tt.model + "]\nreplicas: [{id: r, url: 'http://127.0.0.1:1', models: [m]}]\n"
			if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			var out, errOut bytes.Buffer
			done := make(chan error, 1)
			go func() { done <- run(context.Background(), []string{"--check", "--config", path}, &out, &errOut) }()
			select {
			case err := <-done:
				got := out.String()
				if err != nil || !strings.Contains(got, "valid (1 models") || !strings.Contains(got, tt.note) {
					t.Errorf("--check: %v, printed %q; want valid, and a note with %q", err, got, tt.note)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("--check still runs after 20 s")
			}
		})
	}
}
