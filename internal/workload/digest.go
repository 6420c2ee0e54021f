package workload

import (
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
// what names the kind of file in errors.
func readDigested[T any](path, what string, parse func(io.Reader) (T, error)) (T, string, error) {
	var zero T
	f, err := os.Open(path)
	if err != nil {
		return zero, "", fmt.Errorf("%s: %w", what, err)
	}
	defer f.Close()
	h := sha256.New()
	v, err := parse(io.TeeReader(f, h))
	if err == nil {
		_, err = io.Copy(h, f)
	}
	if err != nil {
		return zero, "", fmt.Errorf("%s %s: %w", what, path, err)
	}
	return v, hex.EncodeToString(h.Sum(nil)), nil
}
