package enginehash

import (
	"encoding/binary"
	"slices"
	"unicode/utf8"
)

// The pickle opcodes these tuples use (CPython's Lib/pickle.py names).
const (
	opMark            = 0x28 // '('
	opStop            = 0x2e // '.'
	opBinint          = 0x4a // 'J': signed 4-byte little-endian int
	opBinint1         = 0x4b // 'K': 1-byte unsigned int
	opBinint2         = 0x4d // 'M': 2-byte little-endian unsigned int
	opNone            = 0x4e // 'N'
	opBinunicode      = 0x58 // 'X': str, 4-byte length
	opBinget          = 0x68 // 'h': memo fetch, 1-byte index
	opLongBinget      = 0x6a // 'j': memo fetch, 4-byte index
	opTuple           = 0x74 // 't': tuple of the items since MARK
	opEmptyTuple      = 0x29 // ')'
	opBinbytes        = 0x42 // 'B': bytes, 4-byte length
	opShortBinbytes   = 0x43 // 'C': bytes, 1-byte length
	opProto           = 0x80
	opLong1           = 0x8a // int as n little-endian two's-complement bytes
	opTuple1          = 0x85
	opTuple2          = 0x86
	opTuple3          = 0x87
	opShortBinunicode = 0x8c // str, 1-byte length
	opBinunicode8     = 0x8d // str, 8-byte length
	opBinbytes8       = 0x8e // bytes, 8-byte length
	opMemoize         = 0x94
	opFrame           = 0x95
)

// Framing constants of CPython's pickler (protocol 4 and later).
const (
	frameHeaderSize = 9         // FRAME and its 8-byte length
	frameSizeMin    = 4         // a shorter frame is written unframed
	frameSizeTarget = 64 * 1024 // a frame this long is closed before the next object
)

// pickler writes protocol-5 pickles as CPython's C pickler (_pickle, which
// pickle.dumps uses) does, for the few types a block tuple holds.
//
// Framing, as _pickle does it: PROTO is written unframed; the first write
// after it opens a frame by reserving a 9-byte header. Before each object
// is saved, an open frame of at least 64 KiB is committed, and the next
// write opens a new one. A bytes or str payload of at least 64 KiB commits
// the open frame and is written unframed, header and all. Committing writes
// FRAME and the length into the header, or, for a frame under 4 bytes,
// removes the header. The last frame, which ends with STOP, is committed
// the same way.
//
// Memoisation: every bytes, str and non-empty tuple is followed by MEMOIZE.
// Ints and None are not memoised. pickle memoises by object identity, and
// vLLM builds each block tuple from distinct objects, except that CPython
// shares one object for every empty or one-character latin-1 str: when
// such a str recurs in a tuple (a LoRA named "a" salted with "a"), the
// second is a BINGET of the first.
//
// Every golden encoding pickles identically under CPython 3.10, 3.11, 3.12
// and 3.13.
type pickler struct {
	buf        []byte
	frameStart int // offset of the open frame's reserved header; -1 when none is open
	memoLen    int
	shared     []memoStr
}

type memoStr struct {
	s   string
	idx int
}

func (p *pickler) reset(buf []byte) {
	p.buf = buf
	p.frameStart = -1
	p.memoLen = 0
	p.shared = p.shared[:0]
}

// open makes sure a frame is open before a framed write.
func (p *pickler) open() {
	if p.frameStart < 0 {
		p.frameStart = len(p.buf)
		p.buf = append(p.buf, 0, 0, 0, 0, 0, 0, 0, 0, 0)
	}
}

func (p *pickler) commit() {
	if p.frameStart < 0 {
		return
	}
	n := len(p.buf) - p.frameStart - frameHeaderSize
	if n >= frameSizeMin {
		p.buf[p.frameStart] = opFrame
		binary.LittleEndian.PutUint64(p.buf[p.frameStart+1:], uint64(n))
	} else {
		copy(p.buf[p.frameStart:], p.buf[p.frameStart+frameHeaderSize:])
		p.buf = p.buf[:len(p.buf)-frameHeaderSize]
	}
	p.frameStart = -1
}

// boundary runs before each object is saved.
func (p *pickler) boundary() {
	if p.frameStart >= 0 && len(p.buf)-p.frameStart-frameHeaderSize >= frameSizeTarget {
		p.commit()
	}
}

func (p *pickler) op(b byte) {
	p.open()
	p.buf = append(p.buf, b)
}

func (p *pickler) memoize() {
	p.op(opMemoize)
	p.memoLen++
}

func (p *pickler) begin() {
	p.buf = append(p.buf, opProto, 5)
}

func (p *pickler) end() {
	p.op(opStop)
	p.commit()
}

// payload writes a bytes or str opcode with its length field and data.
func (p *pickler) payload(short, long, long8 byte, data string) {
	n := len(data)
	if n >= frameSizeTarget {
		p.commit()
	} else {
		p.open()
	}
	switch {
	case n <= 0xff && short != 0:
		p.buf = append(p.buf, short, byte(n))
	case uint64(n) <= 0xffffffff:
		p.buf = append(p.buf, long)
		p.buf = binary.LittleEndian.AppendUint32(p.buf, uint32(n))
	default:
		p.buf = append(p.buf, long8)
		p.buf = binary.LittleEndian.AppendUint64(p.buf, uint64(n))
	}
	p.buf = append(p.buf, data...)
}

func (p *pickler) bytes(b []byte) {
	p.boundary()
	p.payload(opShortBinbytes, opBinbytes, opBinbytes8, string(b))
	p.memoize()
}

// singleton reports whether CPython keeps one shared object for s: the
// empty string and every one-character latin-1 string.
func singleton(s string) bool {
	if s == "" {
		return true
	}
	r, n := utf8.DecodeRuneInString(s)
	return n == len(s) && r < 0x100 && !(r == utf8.RuneError && n == 1)
}

func (p *pickler) str(s string) {
	p.boundary()
	share := singleton(s)
	if share {
		for _, m := range p.shared {
			if m.s == s {
				p.get(m.idx)
				return
			}
		}
	}
	p.payload(opShortBinunicode, opBinunicode, opBinunicode8, s)
	if share {
		p.shared = append(p.shared, memoStr{s, p.memoLen})
	}
	p.memoize()
}

func (p *pickler) get(idx int) {
	p.open()
	if idx < 0x100 {
		p.buf = append(p.buf, opBinget, byte(idx))
		return
	}
	p.buf = append(p.buf, opLongBinget)
	p.buf = binary.LittleEndian.AppendUint32(p.buf, uint32(idx))
}

// ints saves the items of a token tuple. Between two checks of the frame
// boundary it writes as many ints as cannot reach the 64 KiB target (each
// is at most 6 bytes) without checking, which is what keeps pickling close
// to CBOR in speed.
func (p *pickler) ints(tokens []uint32) {
	for len(tokens) > 0 {
		p.boundary()
		p.open()
		room := frameSizeTarget - (len(p.buf) - p.frameStart - frameHeaderSize)
		n := min((room+5)/6, len(tokens))
		buf := slices.Grow(p.buf, 6*n)
		for _, v := range tokens[:n] {
			buf = appendPickleInt(buf, v)
		}
		p.buf = buf
		tokens = tokens[n:]
	}
}

func appendPickleInt(b []byte, v uint32) []byte {
	switch {
	case v <= 0xff:
		return append(b, opBinint1, byte(v))
	case v <= 0xffff:
		return append(b, opBinint2, byte(v), byte(v>>8))
	case v <= 0x7fffffff:
		return binary.LittleEndian.AppendUint32(append(b, opBinint), v)
	default:
		// Past BININT's signed range: LONG1 with the fewest bytes that
		// keep the sign bit clear, (bits/8)+1 = 5.
		return append(binary.LittleEndian.AppendUint32(append(b, opLong1, 5), v), 0)
	}
}

// tupleStart and tupleEnd bracket the items of a non-empty tuple of n.
func (p *pickler) tupleStart(n int) {
	if n > 3 {
		p.op(opMark)
	}
}

func (p *pickler) tupleEnd(n int) {
	switch n {
	case 1:
		p.op(opTuple1)
	case 2:
		p.op(opTuple2)
	case 3:
		p.op(opTuple3)
	default:
		p.op(opTuple)
	}
	p.memoize()
}

// block appends pickle.dumps((parent, tuple(tokens), extra), 5).
func (p *pickler) block(parent []byte, tokens []uint32, extra ExtraKeys) {
	p.begin()
	p.boundary()
	p.tupleStart(3)
	p.bytes(parent)
	p.boundary()
	if len(tokens) == 0 {
		p.op(opEmptyTuple)
	} else {
		p.tupleStart(len(tokens))
		p.ints(tokens)
		p.tupleEnd(len(tokens))
	}
	p.boundary()
	if len(extra) == 0 {
		p.op(opNone)
	} else {
		p.tupleStart(len(extra))
		for _, s := range extra {
			p.str(s)
		}
		p.tupleEnd(len(extra))
	}
	p.tupleEnd(3)
	p.end()
}

// string appends pickle.dumps(s, 5).
func (p *pickler) string(s string) {
	p.begin()
	p.str(s)
	p.end()
}
