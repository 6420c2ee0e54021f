//go:build !race

package gateway

import (
	"bytes"
	"io"
	runtimemetrics "runtime/metrics"
	"testing"
)

// oneByteReader hands out its data a byte per Read, as a client sending a
// byte per TCP segment does.
type oneByteReader struct{ data []byte }

func (o *oneByteReader) Read(p []byte) (int, error) {
	if len(o.data) == 0 {
		return 0, nil
	}
	p[0] = o.data[0]
	o.data = o.data[1:]
	return 1, nil
}

// TestReadAllSizedAllocates bounds what reading an 8 MiB body a byte at a
// time allocates: its own 8 MiB and the first 1 MiB buffer, not the chain
// of doublings (1+2+4+8+16 MiB) a bytes.Buffer takes. The runtime's count
// of heap bytes allocated is read around the call; the test is not run
// under the race detector, whose runtime allocates on its own.
func TestReadAllSizedAllocates(t *testing.T) {
	const size = 8 << 20
	for _, tc := range []struct {
		name  string
		claim int64
		bound uint64
	}{
		{"content-length", size, size + firstBodyBuffer + 1<<20},
		// Unknown length: doubling from 4 KiB to 8 MiB, 16 MiB in all.
		{"chunked", -1, 2*size + 1<<20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := bytes.Repeat([]byte("x"), size)
			r := &eofAfter{r: &oneByteReader{data: data}, left: size}
			before := heapAllocated()
			got, err := readAllSized(r, tc.claim)
			after := heapAllocated()
			if err != nil || len(got) != size {
				t.Fatalf("read %d bytes, %v; want %d", len(got), err, size)
			}
			if d := after - before; d > tc.bound {
				t.Errorf("reading %d bytes allocated %d bytes, want at most %d", size, d, tc.bound)
			}
		})
	}
}

// eofAfter ends r with io.EOF once left bytes were read.
type eofAfter struct {
	r    *oneByteReader
	left int
}

func (e *eofAfter) Read(p []byte) (int, error) {
	if e.left == 0 {
		return 0, io.EOF
	}
	n, _ := e.r.Read(p)
	e.left -= n
	return n, nil
}

func heapAllocated() uint64 {
	s := []runtimemetrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	runtimemetrics.Read(s)
	return s[0].Value.Uint64()
}
