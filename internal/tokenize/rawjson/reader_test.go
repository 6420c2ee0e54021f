package rawjson

import (
	"bytes"
	"errors"
	"testing"
)

// TestReaderSlices: values and names come back as slices of the input,
// capped, and Decoded takes only the very slice it was decoded from.
func TestReaderSlices(t *testing.T) {
	src := []byte(`{"a\u0062": "x\ud800y", "c": [1, {"d": null}]} `)
	r := NewReader(src)
	defer r.Release()
	var names []string
	var vals [][]byte
	err := r.Members(func(r *Reader, name []byte) error {
		names = append(names, string(name))
		v, err := r.Value()
		vals = append(vals, v)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 2 || names[0] != "ab" || names[1] != "c" {
		t.Fatalf("names %q, want [ab c]", names)
	}
	if string(vals[1]) != `[1, {"d": null}]` || cap(vals[1]) != len(vals[1]) || &vals[1][0] != &src[bytes.IndexByte(src, '[')] {
		t.Errorf("value %q (cap %d): want a capped slice of the input", vals[1], cap(vals[1]))
	}
	s := Unquote(vals[0])
	if s != "x\uFFFDy" {
		t.Errorf("Unquote(%s) = %q, want an unpaired surrogate as U+FFFD", vals[0], s)
	}
	d := Decoded{Raw: vals[0], Value: s}
	if got, ok := d.Of(vals[0]); !ok || got != s {
		t.Errorf("Of(the same slice) = %q, %v", got, ok)
	}
	if _, ok := d.Of([]byte(string(vals[0]))); ok {
		t.Error("Of(an equal copy) is taken, want only the slice decoded")
	}
	list := NewReader([]byte(`[1]`))
	defer list.Release()
	if err := list.Members(nil); !errors.Is(err, ErrNotObject) {
		t.Errorf("Members of a list = %v, want ErrNotObject", err)
	}
}

func TestReaderEnd(t *testing.T) {
	for _, tt := range []struct {
		in       string
		trailing bool // ErrTrailing
		syntax   bool // another error
	}{
		{in: `{"a":1}`},
		{in: "{\"a\":1} \n\t"},
		{in: `{"a":1} 2`, trailing: true},
		{in: `{"a":1}{}`, trailing: true},
		{in: `{"a":1} ]`, syntax: true},
		{in: `{"a":1} "x`, syntax: true},
	} {
		r := NewReader([]byte(tt.in))
		if _, err := r.Value(); err != nil {
			t.Fatalf("%q: Value: %v", tt.in, err)
		}
		err := r.End()
		r.Release()
		switch {
		case tt.trailing && !errors.Is(err, ErrTrailing), tt.syntax && (err == nil || errors.Is(err, ErrTrailing)),
			!tt.trailing && !tt.syntax && err != nil:
			t.Errorf("End after %q = %v", tt.in, err)
		}
	}
}
