package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
)

// JSON returns c as JSON: the keys and values its YAML file would hold,
// in the file's order, durations as text such as "2s". Every patch and
// admin read starts from it, so it is written straight from the struct
// rather than through a YAML document; a property test holds it to what
// yaml's encoder writes.
func (c *Config) JSON() ([]byte, error) {
	var b bytes.Buffer
	b.Grow(4096)
	if err := writeJSON(&b, reflect.ValueOf(c).Elem()); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// writeJSON writes v, a value of a config type, as yaml would encode it
// and JSON would hold it: structs as objects keyed by their yaml tags,
// omitempty fields left out when yaml leaves them out, the types with a
// YAML form of their own in that form.
func writeJSON(b *bytes.Buffer, v reflect.Value) error {
	switch t := v.Type(); {
	case t == durationType:
		writeJSONString(b, Duration(v.Int()).String())
	case t == jsonObjectType:
		writeJSONString(b, v.String())
	case t == splitType:
		b.WriteByte('{')
		for i, a := range v.Interface().(Split) {
			if i > 0 {
				b.WriteByte(',')
			}
			writeJSONString(b, a.Policy)
			b.WriteByte(':')
			b.WriteString(strconv.Itoa(a.Percent))
		}
		b.WriteByte('}')
	default:
		return writeJSONKind(b, v)
	}
	return nil
}

func writeJSONKind(b *bytes.Buffer, v reflect.Value) error {
	switch v.Kind() {
	case reflect.Struct:
		b.WriteByte('{')
		first := true
		for i, f := range keyFields(v.Type()) {
			fv := v.Field(i)
			if f.omitEmpty && yamlZero(fv) {
				continue
			}
			if !first {
				b.WriteByte(',')
			}
			first = false
			writeJSONString(b, f.name)
			b.WriteByte(':')
			if err := writeJSON(b, fv); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	case reflect.Slice:
		b.WriteByte('[')
		for i := range v.Len() {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := writeJSON(b, v.Index(i)); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	case reflect.Pointer:
		if v.IsNil() {
			b.WriteString("null")
			return nil
		}
		return writeJSON(b, v.Elem())
	case reflect.String:
		writeJSONString(b, v.String())
	case reflect.Bool:
		b.WriteString(strconv.FormatBool(v.Bool()))
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		b.WriteString(strconv.FormatInt(v.Int(), 10))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		b.WriteString(strconv.FormatUint(v.Uint(), 10))
	case reflect.Float32, reflect.Float64:
		if v.Float() == 0 {
			b.WriteByte('0') // -0 too, as a file's "-0" reads back
			return nil
		}
		s, err := json.Marshal(v.Float())
		if err != nil {
			return fmt.Errorf("config value %v has no JSON form: %w", v.Float(), err)
		}
		b.Write(s)
	default:
		return fmt.Errorf("config: a value of type %s has no JSON form", v.Type())
	}
	return nil
}

// writeJSONString writes s as a JSON string, escaped as encoding/json
// escapes it.
func writeJSONString(b *bytes.Buffer, s string) {
	q, _ := json.Marshal(s) // a string always marshals
	b.Write(q)
}

// yamlZero reports whether yaml's encoder leaves v out of an omitempty
// field: what says it is zero, else an empty or zero value of its kind.
func yamlZero(v reflect.Value) bool {
	if z, ok := v.Interface().(interface{ IsZero() bool }); ok {
		if (v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface) && v.IsNil() {
			return true
		}
		return z.IsZero()
	}
	switch v.Kind() {
	case reflect.String, reflect.Slice, reflect.Map:
		return v.Len() == 0
	case reflect.Pointer, reflect.Interface:
		return v.IsNil()
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() && !yamlZero(v.Field(i)) {
				return false
			}
		}
		return true
	}
	return v.IsZero()
}

// keyField is a struct field as a config file names it.
type keyField struct {
	name      string
	omitEmpty bool
}

// keyFields returns a struct type's fields as its yaml tags name them, in
// order; each type's tags are read once.
func keyFields(t reflect.Type) []keyField {
	if fs, ok := keyFieldsOf.Load(t); ok {
		return fs.([]keyField)
	}
	fs := make([]keyField, t.NumField())
	for i := range fs {
		name, opts, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		fs[i] = keyField{name: name, omitEmpty: strings.Contains(opts, "omitempty")}
	}
	keyFieldsOf.Store(t, fs)
	return fs
}

var keyFieldsOf sync.Map // reflect.Type → []keyField
