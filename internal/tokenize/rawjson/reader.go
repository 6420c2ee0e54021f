// Package rawjson reads JSON in one pass with encoding/json/jsontext and
// hands out the values it reads as slices of its input. It accepts what
// json.Unmarshal accepts (repeated names, invalid UTF-8) and decodes strings
// as json.Unmarshal does, so that package tokenize's request parsers read a
// body once and still give json.Unmarshal's results, and package
// chattemplate reuses the strings they decoded (Decoded).
package rawjson

import (
	"bytes"
	"encoding/json"
	"encoding/json/jsontext"
	"errors"
	"io"
	"sync"
)

// decodeOptions make a jsontext.Decoder accept what json.Unmarshal accepts:
// repeated names and invalid UTF-8.
var decodeOptions = json.DefaultOptionsV1()

var decoderPool = sync.Pool{New: func() any { return jsontext.NewDecoder(emptyReader{}, decodeOptions) }}

type emptyReader struct{}

func (emptyReader) Read([]byte) (int, error) { return 0, io.EOF }

// ErrNotObject is Members' error for a value that is not an object.
var ErrNotObject = errors.New("not an object")

// Reader reads JSON values from its input and hands them out as slices of
// it, capped so that appending to them copies. Release it when done.
type Reader struct {
	// Dec is the decoder over the input, for peeking at the next kind,
	// reading tokens and skipping values.
	Dec *jsontext.Decoder
	src []byte
}

// NewReader returns a reader of src, with a decoder from a pool.
func NewReader(src []byte) Reader {
	dec := decoderPool.Get().(*jsontext.Decoder)
	dec.Reset(bytes.NewBuffer(src), decodeOptions) // parsed in place, not copied
	return Reader{Dec: dec, src: src}
}

// Release returns the decoder to the pool, without the input.
func (r *Reader) Release() {
	r.Dec.Reset(emptyReader{}, decodeOptions)
	decoderPool.Put(r.Dec)
	r.Dec = nil
}

// Value reads the next value.
func (r *Reader) Value() ([]byte, error) {
	v, err := r.Dec.ReadValue()
	if err != nil {
		return nil, err
	}
	end := int(r.Dec.InputOffset())
	return r.src[end-len(v) : end : end], nil
}

// ErrTrailing is End's error for input after the value.
var ErrTrailing = errors.New("data after the top-level value")

// End reads past the end of the value read: nil if the input ends there,
// ErrTrailing if something follows, or the syntax error of what follows.
func (r *Reader) End() error {
	_, err := r.Dec.ReadToken()
	switch err {
	case io.EOF:
		return nil
	case nil:
		return ErrTrailing
	}
	return err
}

// Slice returns the input from offset start to end, capped as values are.
func (r *Reader) Slice(start, end int) []byte { return r.src[start:end:end] }

// Name reads the next object member's name, unquoted.
func (r *Reader) Name() ([]byte, error) {
	raw, err := r.Value()
	if err != nil {
		return nil, err
	}
	if bytes.IndexByte(raw, '\\') < 0 {
		// Invalid UTF-8 is left as it is: it matches no name a caller
		// looks for, and json.Unmarshal's U+FFFD would not either.
		return raw[1 : len(raw)-1], nil
	}
	name, _ := jsontext.AppendUnquote(nil, raw)
	return name, nil
}

// Members reads an object, calling visit with each member's name for it to
// read or skip the value. It returns ErrNotObject, having read nothing,
// when the next value is not an object.
func (r *Reader) Members(visit func(r *Reader, name []byte) error) error {
	if r.Dec.PeekKind() != '{' {
		return ErrNotObject
	}
	if _, err := r.Dec.ReadToken(); err != nil {
		return err
	}
	for r.Dec.PeekKind() != '}' {
		name, err := r.Name()
		if err != nil {
			return err
		}
		if err := visit(r, name); err != nil {
			return err
		}
	}
	_, err := r.Dec.ReadToken()
	return err
}

var unquotePool = sync.Pool{New: func() any { return new([]byte) }}

// Unquote decodes raw, a JSON string, as json.Unmarshal does: invalid UTF-8
// and unpaired surrogates become U+FFFD.
func Unquote(raw []byte) string {
	buf := unquotePool.Get().(*[]byte)
	b, _ := jsontext.AppendUnquote((*buf)[:0], raw)
	s := string(b)
	if cap(b) <= 1<<20 {
		*buf = b
		unquotePool.Put(buf)
	}
	return s
}

// Decoded is a JSON string, as a slice of its input, and its value, kept
// so that a later reader of the same input need not decode it again.
type Decoded struct {
	Raw   []byte
	Value string
}

// Of returns the value of raw, a JSON string, when raw is the slice d was
// decoded from (not merely equal to it).
func (d Decoded) Of(raw []byte) (string, bool) {
	if len(d.Raw) == 0 || len(raw) != len(d.Raw) || &raw[0] != &d.Raw[0] {
		return "", false
	}
	return d.Value, true
}
