package enginehash

import "encoding/binary"

// CBOR major types.
const (
	cborUint  = 0 << 5
	cborBytes = 2 << 5
	cborText  = 3 << 5
	cborArray = 4 << 5
	cborNull  = 0xf6
)

// cborHead appends a CBOR item head in its shortest form, as canonical
// encoding requires.
func cborHead(b []byte, major byte, n uint64) []byte {
	switch {
	case n < 24:
		return append(b, major|byte(n))
	case n <= 0xff:
		return append(b, major|24, byte(n))
	case n <= 0xffff:
		return binary.BigEndian.AppendUint16(append(b, major|25), uint16(n))
	case n <= 0xffffffff:
		return binary.BigEndian.AppendUint32(append(b, major|26), uint32(n))
	default:
		return binary.BigEndian.AppendUint64(append(b, major|27), n)
	}
}

// appendCBORBlock appends cbor2.dumps((parent, tuple(tokens), extra),
// canonical=True): tuples are arrays, bytes a byte string, ints unsigned
// integers, None null and str a text string of its UTF-8 bytes. cbor2
// shares no values unless asked to, so nothing is memoised.
func appendCBORBlock(b []byte, parent []byte, tokens []uint32, extra ExtraKeys) []byte {
	b = append(b, cborArray|3)
	b = cborHead(b, cborBytes, uint64(len(parent)))
	b = append(b, parent...)
	b = cborHead(b, cborArray, uint64(len(tokens)))
	for _, t := range tokens {
		b = cborHead(b, cborUint, uint64(t))
	}
	if len(extra) == 0 {
		return append(b, cborNull)
	}
	b = cborHead(b, cborArray, uint64(len(extra)))
	for _, s := range extra {
		b = appendCBORString(b, s)
	}
	return b
}

// appendCBORString appends cbor2.dumps(s, canonical=True).
func appendCBORString(b []byte, s string) []byte {
	b = cborHead(b, cborText, uint64(len(s)))
	return append(b, s...)
}
