package events

// CacheSalt returns the cache_salt among the extra keys vLLM hashed into a
// sequence's first block, or "" when there is none. vLLM builds those keys
// as the adapter name (when the request uses an adapter), then multimodal
// entries (tuples), then the salt (a string), then prompt-embedding
// digests (bytes); so the salt is the last string that is not the adapter
// name in first place. keys is one entry of Event.ExtraKeys.
func CacheSalt(keys RawValue, adapter string) string {
	n, rest, ok := readArrayHeader(keys)
	if !ok {
		return ""
	}
	salt := ""
	for i := 0; i < n; i++ {
		s, isStr, next, ok := readStrOrSkip(rest)
		if !ok {
			return ""
		}
		if isStr && (i > 0 || adapter == "" || s != adapter) {
			salt = s
		}
		rest = next
	}
	return salt
}

// readArrayHeader reads a msgpack array header.
func readArrayHeader(b []byte) (n int, rest []byte, ok bool) {
	if len(b) == 0 {
		return 0, nil, false
	}
	switch c := b[0]; {
	case c&0xf0 == 0x90:
		return int(c & 0x0f), b[1:], true
	case c == 0xdc && len(b) >= 3:
		return int(b[1])<<8 | int(b[2]), b[3:], true
	case c == 0xdd && len(b) >= 5:
		return int(b[1])<<24 | int(b[2])<<16 | int(b[3])<<8 | int(b[4]), b[5:], true
	}
	return 0, nil, false
}

// readStrOrSkip reads one msgpack value: its text when it is a string,
// otherwise it only steps over it.
func readStrOrSkip(b []byte) (s string, isStr bool, rest []byte, ok bool) {
	if len(b) == 0 {
		return "", false, nil, false
	}
	var n, hdr int
	switch c := b[0]; {
	case c&0xe0 == 0xa0:
		n, hdr = int(c&0x1f), 1
	case c == 0xd9 && len(b) >= 2:
		n, hdr = int(b[1]), 2
	case c == 0xda && len(b) >= 3:
		n, hdr = int(b[1])<<8|int(b[2]), 3
	case c == 0xdb && len(b) >= 5:
		n, hdr = int(b[1])<<24|int(b[2])<<16|int(b[3])<<8|int(b[4]), 5
	default:
		rest, ok := skipValue(b, 0)
		return "", false, rest, ok
	}
	if n < 0 || len(b)-hdr < n {
		return "", false, nil, false
	}
	return string(b[hdr : hdr+n]), true, b[hdr+n:], true
}

// skipValue steps over one msgpack value, nested at most 32 deep.
func skipValue(b []byte, depth int) ([]byte, bool) {
	if len(b) == 0 || depth > 32 {
		return nil, false
	}
	c := b[0]
	size := func(width int) (int, bool) {
		if len(b) < 1+width {
			return 0, false
		}
		n := 0
		for _, x := range b[1 : 1+width] {
			n = n<<8 | int(x)
		}
		return n, n >= 0
	}
	skipBytes := func(hdr, n int) ([]byte, bool) {
		if n < 0 || len(b)-hdr < n {
			return nil, false
		}
		return b[hdr+n:], true
	}
	skipMany := func(hdr, n int) ([]byte, bool) {
		rest := b[hdr:]
		for range n {
			var ok bool
			if rest, ok = skipValue(rest, depth+1); !ok {
				return nil, false
			}
		}
		return rest, true
	}
	switch {
	case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
		return b[1:], true
	case c&0xe0 == 0xa0:
		return skipBytes(1, int(c&0x1f))
	case c&0xf0 == 0x90:
		return skipMany(1, int(c&0x0f))
	case c&0xf0 == 0x80:
		return skipMany(1, 2*int(c&0x0f))
	}
	fixed := map[byte]int{0xcc: 1, 0xcd: 2, 0xce: 4, 0xcf: 8, 0xd0: 1, 0xd1: 2, 0xd2: 4, 0xd3: 8, 0xca: 4, 0xcb: 8,
		0xd4: 2, 0xd5: 3, 0xd6: 5, 0xd7: 9, 0xd8: 17}
	if w, ok := fixed[c]; ok {
		return skipBytes(1, w)
	}
	var width, mult int
	var items bool
	switch c {
	case 0xc4, 0xd9:
		width = 1
	case 0xc5, 0xda:
		width = 2
	case 0xc6, 0xdb:
		width = 4
	case 0xdc:
		width, items, mult = 2, true, 1
	case 0xdd:
		width, items, mult = 4, true, 1
	case 0xde:
		width, items, mult = 2, true, 2
	case 0xdf:
		width, items, mult = 4, true, 2
	case 0xc7, 0xc8, 0xc9: // ext: size, then a type byte
		w := map[byte]int{0xc7: 1, 0xc8: 2, 0xc9: 4}[c]
		n, ok := size(w)
		if !ok {
			return nil, false
		}
		return skipBytes(1+w+1, n)
	default:
		return nil, false
	}
	n, ok := size(width)
	if !ok {
		return nil, false
	}
	if items {
		return skipMany(1+width, mult*n)
	}
	return skipBytes(1+width, n)
}
