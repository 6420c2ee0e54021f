package workload

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
)

// readDigested opens path once, parses it and returns the SHA-256 of every
// byte in the file, in hex. Reading once lets a pipe or a FIFO replay as a
// file does; the digest covers bytes past where parse stopped too (an
// array's end, a last line), so that it tells two files at one path apart.
// what names the kind of file in errors. It returns ctx's error as soon as
// ctx is done, and closes the file to stop the reading: a FIFO whose
// writer never ends it, or one that never opens, would otherwise hold the
// command (SIGINT and SIGTERM cancel its ctx) and grow its memory for good.
func readDigested[T any](ctx context.Context, path, what string, parse func(io.Reader) (T, error)) (T, string, error) {
	type read struct {
		v      T
		digest string
		err    error
	}
	done := make(chan read, 1)
	go func() {
		f, err := os.Open(path) // a FIFO's open waits for a writer
		if err != nil {
			done <- read{err: fmt.Errorf("%s: %w", what, err)}
			return
		}
		defer f.Close()
		stop := context.AfterFunc(ctx, func() { f.Close() }) // ends a read waiting on a pipe or a FIFO
		defer stop()
		h := sha256.New()
		v, err := parse(io.TeeReader(f, h))
		if err == nil {
			_, err = io.Copy(h, f)
		}
		if err != nil {
			done <- read{err: fmt.Errorf("%s %s: %w", what, path, err)}
			return
		}
		done <- read{v: v, digest: hex.EncodeToString(h.Sum(nil))}
	}()
	select {
	case r := <-done:
		return r.v, r.digest, r.err
	case <-ctx.Done():
	}
	var zero T
	return zero, "", fmt.Errorf("%s %s: reading stopped: %w", what, path, context.Cause(ctx))
}
