package events

import "fmt"

// ParseEncoding reads an Encoding by its String name; "" means EncodingMap,
// what current vLLM sends.
func ParseEncoding(name string) (Encoding, error) {
	for _, e := range []Encoding{EncodingMap, EncodingArray, EncodingSGLang} {
		if name == e.String() {
			return e, nil
		}
	}
	if name == "" {
		return EncodingMap, nil
	}
	return 0, fmt.Errorf("unknown encoding %q (want map, array or sglang)", name)
}

// ReplayEnd is the sequence frame of the message that ends a replay: -1 as
// eight big-endian bytes, as vLLM's publisher sends it.
var ReplayEnd = []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
