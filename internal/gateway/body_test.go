package gateway

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"

	"pgregory.net/rapid"
)

// chunkReader hands out its data in the chunk sizes given, cycling, and
// then an end.
type chunkReader struct {
	data   []byte
	chunks []int
	i      int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := min(len(p), len(c.data), c.chunks[c.i%len(c.chunks)])
	c.i++
	copy(p, c.data[:n])
	c.data = c.data[n:]
	return n, nil
}

// TestReadAllSized: whatever the body's size, the length it claims (right,
// unknown, or short of the truth) and how it arrives, readAllSized returns
// exactly what io.ReadAll would.
func TestReadAllSized(t *testing.T) {
	if raceEnabled {
		t.Skip("one goroutine drawing and checking thousands of bodies, where the race detector has nothing to find; make norace runs it")
	}
	rapid.Check(t, func(rt *rapid.T) {
		size := rapid.OneOf(rapid.IntRange(0, 64), rapid.IntRange(0, 3<<20),
			rapid.SampledFrom([]int{firstBodyBuffer - 1, firstBodyBuffer, firstBodyBuffer + 1, 8 * firstBodyBuffer})).Draw(rt, "size")
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(i*7 + i>>8)
		}
		claim := int64(size)
		switch rapid.IntRange(0, 3).Draw(rt, "claim") {
		case 1:
			claim = -1
		case 2:
			claim = int64(rapid.IntRange(0, size).Draw(rt, "under"))
		}
		chunks := rapid.SliceOfN(rapid.IntRange(1, 1<<17), 1, 4).Draw(rt, "chunks")
		got, err := readAllSized(&chunkReader{data: data, chunks: chunks}, claim)
		if err != nil {
			rt.Fatalf("readAllSized: %v", err)
		}
		if !bytes.Equal(got, data) {
			rt.Fatalf("read %d bytes, want the %d sent (claimed %d)", len(got), size, claim)
		}
	})
}

func TestReadAllSizedErrors(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name  string
		r     io.Reader
		claim int64
	}{
		{"fails-at-once", iotest.ErrReader(boom), 10},
		{"fails-midway", io.MultiReader(bytes.NewReader(make([]byte, 5000)), iotest.ErrReader(boom)), -1},
		{"fails-at-the-claimed-end", io.MultiReader(bytes.NewReader(make([]byte, 5000)), iotest.ErrReader(boom)), 5000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := readAllSized(tc.r, tc.claim); !errors.Is(err, boom) {
				t.Fatalf("err = %v, want boom", err)
			}
		})
	}
}
