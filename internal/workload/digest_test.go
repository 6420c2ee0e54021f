package workload

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// A trace or a ShareGPT file read from a FIFO that never ends, or that no
// writer ever opens, stops being read when the command's context is done
// (SIGINT, SIGTERM): the reading held inferrail-bench past both signals
// while its memory grew by 150 MB a second.
func TestReadStopsWithContext(t *testing.T) {
	read := map[string]func(context.Context, string) error{
		"trace": func(ctx context.Context, path string) error {
			_, _, err := ReadTraceDigest(ctx, path)
			return err
		},
		"sharegpt": func(ctx context.Context, path string) error {
			_, _, err := ReadShareGPT(ctx, path)
			return err
		},
	}
	first := map[string]string{
		"trace":    `{"timestamp": 0, "input_length": 10, "output_length": 1}` + "\n",
		"sharegpt": `[{"id": "a", "conversations": [{"from": "human", "value": "hi"}]},`,
	}
	for _, kind := range []string{"trace", "sharegpt"} {
		for _, writer := range []bool{true, false} {
			name := kind + map[bool]string{true: "/open_writer", false: "/no_writer"}[writer]
			t.Run(name, func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "fifo")
				if err := syscall.Mkfifo(path, 0o600); err != nil {
					t.Skip("no FIFO here:", err)
				}
				ctx, cancel := context.WithCancel(t.Context())
				if writer {
					// Opening the write end waits for the reader: open it
					// beside the read, write a line and keep it open until
					// the read returned.
					finished := make(chan struct{})
					defer close(finished)
					go func() {
						f, err := os.OpenFile(path, os.O_WRONLY, 0)
						if err != nil {
							t.Error(err)
							cancel()
							return
						}
						defer f.Close()
						f.WriteString(first[kind])
						cancel()
						<-finished
					}()
				} else {
					cancel()
				}
				err := read[kind](ctx, path)
				if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "reading stopped") {
					t.Fatalf("read = %v; want it stopped by the context", err)
				}
				if !writer {
					// Let the open still waiting for a writer return.
					if f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
						f.Close()
					}
				}
			})
		}
	}
}
