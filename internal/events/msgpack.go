package events

import (
	"encoding/binary"

	"github.com/tinylib/msgp/msgp"
)

// The decoder's msgpack primitives. They wrap msgp's byte-slice readers,
// which accept every width of a type (a uint8 or an int64 holding a small
// value alike), and add what those leave to the caller: a length checked
// against the bytes left, and errors in this package's vocabulary. Skipping
// is written here rather than taken from msgp.Skip, which recurses once per
// nesting level (up to 100,000 deep): skipN keeps a count of the values
// still to skip instead, so no input can deepen the stack.

// arrayLen reads an array header whose length the rest of the payload can
// hold (every element takes at least one byte).
func (d *decoder) arrayLen() (int, error) {
	n, rest, err := msgp.ReadArrayHeaderBytes(d.rest)
	if err != nil {
		return 0, d.failMsgp(err)
	}
	if uint64(n) > uint64(len(rest)) {
		return 0, d.fail(ErrTooLong)
	}
	d.rest = rest
	return int(n), nil
}

// mapLen is arrayLen for a map header (each pair takes two bytes at least).
func (d *decoder) mapLen() (int, error) {
	n, rest, err := msgp.ReadMapHeaderBytes(d.rest)
	if err != nil {
		return 0, d.failMsgp(err)
	}
	if 2*uint64(n) > uint64(len(rest)) {
		return 0, d.fail(ErrTooLong)
	}
	d.rest = rest
	return int(n), nil
}

// float reads a float64 or float32, or an integer (msgspec decodes an int
// into a float field too).
func (d *decoder) float() (float64, error) {
	switch msgp.NextType(d.rest) {
	case msgp.IntType:
		v, err := d.int()
		return float64(v), err
	case msgp.UintType:
		v, rest, err := msgp.ReadUint64Bytes(d.rest)
		if err != nil {
			return 0, d.failMsgp(err)
		}
		d.rest = rest
		return float64(v), nil
	}
	v, rest, err := msgp.ReadFloat64Bytes(d.rest)
	if err != nil {
		return 0, d.failMsgp(err)
	}
	d.rest = rest
	return v, nil
}

// int reads any msgpack integer that fits int64.
func (d *decoder) int() (int64, error) {
	v, rest, err := msgp.ReadInt64Bytes(d.rest)
	if err != nil {
		return 0, d.failMsgp(err)
	}
	d.rest = rest
	return v, nil
}

// optInt reads nil (has false) or an integer.
func (d *decoder) optInt() (v int64, has bool, err error) {
	if d.nil() {
		return 0, false, nil
	}
	v, err = d.int()
	return v, err == nil, err
}

// str reads a str, returning bytes that alias the payload.
func (d *decoder) str() ([]byte, error) {
	v, rest, err := msgp.ReadStringZC(d.rest)
	if err != nil {
		return nil, d.failMsgp(err)
	}
	d.rest = rest
	return v, nil
}

// optStr reads nil (has false) or a str. The string is prev when equal to
// it (the value the reused event held), a constant for the values engines
// send, and a new string only otherwise: decoding allocates no strings in
// the steady state.
func (d *decoder) optStr(prev string) (s string, has bool, err error) {
	if d.nil() {
		return "", false, nil
	}
	v, err := d.str()
	if err != nil {
		return "", false, err
	}
	if string(v) == prev {
		return prev, true, nil
	}
	return intern(v), true, nil
}

// intern returns the constant for the media, spec kinds and localities
// vLLM and SGLang send, or a copy of v.
func intern(v []byte) string {
	switch string(v) {
	case "GPU":
		return "GPU"
	case "CPU":
		return "CPU"
	case "STORAGE":
		return "STORAGE"
	case "CPU_PINNED":
		return "CPU_PINNED"
	case "DISK":
		return "DISK"
	case "EXTERNAL":
		return "EXTERNAL"
	case "full_attention":
		return "full_attention"
	case "mla_attention":
		return "mla_attention"
	case "sliding_window":
		return "sliding_window"
	case "sliding_window_mla":
		return "sliding_window_mla"
	case "mamba":
		return "mamba"
	case "chunked_local_attention":
		return "chunked_local_attention"
	case "LOCAL":
		return "LOCAL"
	case "REMOTE":
		return "REMOTE"
	}
	return string(v)
}

// nil consumes a nil and reports whether there was one.
func (d *decoder) nil() bool {
	if len(d.rest) > 0 && d.rest[0] == 0xc0 {
		d.rest = d.rest[1:]
		return true
	}
	return false
}

// raw reads one whole value, returning its bytes (aliasing the payload).
func (d *decoder) raw() ([]byte, error) {
	start := d.rest
	if err := d.skipN(1); err != nil {
		return nil, err
	}
	return start[:len(start)-len(d.rest)], nil
}

func isBin(lead byte) bool { return lead >= 0xc4 && lead <= 0xc6 }

// skipN skips n whole values. A container adds its elements to the count;
// a count larger than the bytes left fails at once (ErrTooLong), so a
// claimed 2^32 elements costs nothing.
func (d *decoder) skipN(n uint64) error {
	p := d.rest
	for ; n > 0; n-- {
		if uint64(len(p)) < n {
			d.rest = p
			if len(p) == 0 {
				return d.fail(ErrTruncated)
			}
			return d.fail(ErrTooLong)
		}
		size, elems, ok := valueSize(p)
		if !ok {
			d.rest = p
			if p[0] == 0xc1 {
				return d.fail(ErrType)
			}
			return d.fail(ErrTruncated)
		}
		if size > uint64(len(p)) {
			d.rest = p
			return d.fail(ErrTruncated)
		}
		p = p[size:]
		n += elems
	}
	d.rest = p
	return nil
}

// valueSize returns the bytes of the value at the start of p that precede
// its elements (all of it, for a scalar), and how many values a container
// holds (pairs count twice); ok is false for 0xc1, which msgpack never
// uses, or a header cut short.
func valueSize(p []byte) (size, elems uint64, ok bool) {
	lead := p[0]
	switch {
	case lead <= 0x7f || lead >= 0xe0: // fixint
		return 1, 0, true
	case lead <= 0x8f: // fixmap
		return 1, 2 * uint64(lead&0x0f), true
	case lead <= 0x9f: // fixarray
		return 1, uint64(lead & 0x0f), true
	case lead <= 0xbf: // fixstr
		return 1 + uint64(lead&0x1f), 0, true
	}
	// Sizes from 0xc0: a fixed size, or a header of hdr bytes whose length
	// counts bytes (extra is the bytes after the length) or elements.
	type form struct {
		fixed, hdr, extra uint8
		elems, pairs      bool
	}
	var f form
	switch lead {
	case 0xc0, 0xc2, 0xc3:
		f = form{fixed: 1}
	case 0xc1:
		return 0, 0, false
	case 0xc4, 0xd9:
		f = form{hdr: 1}
	case 0xc5, 0xda:
		f = form{hdr: 2}
	case 0xc6, 0xdb:
		f = form{hdr: 4}
	case 0xc7:
		f = form{hdr: 1, extra: 1}
	case 0xc8:
		f = form{hdr: 2, extra: 1}
	case 0xc9:
		f = form{hdr: 4, extra: 1}
	case 0xca, 0xce, 0xd2:
		f = form{fixed: 5}
	case 0xcb, 0xcf, 0xd3:
		f = form{fixed: 9}
	case 0xcc, 0xd0:
		f = form{fixed: 2}
	case 0xcd, 0xd1:
		f = form{fixed: 3}
	case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8: // fixext 1, 2, 4, 8, 16
		f = form{fixed: 2 + 1<<(lead-0xd4)}
	case 0xdc:
		f = form{hdr: 2, elems: true}
	case 0xdd:
		f = form{hdr: 4, elems: true}
	case 0xde:
		f = form{hdr: 2, elems: true, pairs: true}
	case 0xdf:
		f = form{hdr: 4, elems: true, pairs: true}
	}
	if f.fixed > 0 {
		return uint64(f.fixed), 0, true
	}
	if len(p) < 1+int(f.hdr) {
		return 0, 0, false
	}
	var length uint64
	switch f.hdr {
	case 1:
		length = uint64(p[1])
	case 2:
		length = uint64(binary.BigEndian.Uint16(p[1:]))
	default:
		length = uint64(binary.BigEndian.Uint32(p[1:]))
	}
	head := 1 + uint64(f.hdr) + uint64(f.extra)
	switch {
	case f.pairs:
		return head, 2 * length, true
	case f.elems:
		return head, length, true
	}
	return head + length, 0, true
}
