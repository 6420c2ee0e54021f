//go:build unix

package chattemplate

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/filewatch/filewatchtest"
	"github.com/inferrail/inferrail/internal/tokenize/hf"
)

// TestTemplatePathNotAFile: a chat template path naming a named pipe, or a
// symlink to /dev/zero, is refused at once with an error naming it. The
// renderer used to wait forever for the pipe's writer and read /dev/zero
// until memory ran out, at the gateway's start (a review's finding).
func TestTemplatePathNotAFile(t *testing.T) {
	for _, kind := range filewatchtest.Specials(t) {
		t.Run(kind.Name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "chat.jinja")
			if err := kind.Make(path); err != nil {
				t.Fatal(err)
			}
			err := filewatchtest.Within(t, 10*time.Second, func() error {
				_, err := newRenderer(nil, hf.ChatConfig{}, Options{Template: path})
				return err
			})
			if !errors.Is(err, kind.Want) || !strings.Contains(err.Error(), path) {
				t.Errorf("template %s: %v, want %v naming the path", path, err, kind.Want)
			}
		})
	}
}
