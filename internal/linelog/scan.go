package linelog

import (
	"bufio"
	"bytes"
	"io"
)

// NewScanner returns a scanner of r's lines, each at most max bytes
// (bufio.ErrTooLong past it), without their line ends ("\n" or "\r\n"),
// the last one without its end too. Unlike bufio.ScanLines, which searches
// a long line from its start again after every read (hours for a line of
// hundreds of MiB read from a pipe), it searches each byte once.
func NewScanner(r io.Reader, max int) *bufio.Scanner {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, min(max, 64<<10)), max)
	searched := 0 // bytes of the pending line known to hold no '\n'
	sc.Split(func(data []byte, atEOF bool) (int, []byte, error) {
		if i := bytes.IndexByte(data[searched:], '\n'); i >= 0 {
			end := searched + i
			searched = 0
			return end + 1, bytes.TrimSuffix(data[:end], []byte{'\r'}), nil
		}
		if atEOF && len(data) > 0 {
			searched = 0
			return len(data), bytes.TrimSuffix(data, []byte{'\r'}), nil
		}
		searched = len(data)
		return 0, nil, nil
	})
	return sc
}
