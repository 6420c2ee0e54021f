package events

import "testing"

func TestParseEncoding(t *testing.T) {
	for name, want := range map[string]Encoding{"": EncodingMap, "map": EncodingMap, "array": EncodingArray, "sglang": EncodingSGLang} {
		if got, err := ParseEncoding(name); err != nil || got != want {
			t.Errorf("ParseEncoding(%q) = %v, %v; want %v", name, got, err, want)
		}
	}
	if _, err := ParseEncoding("json"); err == nil {
		t.Error("ParseEncoding(json) accepted")
	}
}

func TestCacheSalt(t *testing.T) {
	str := func(s string) []byte { return append([]byte{0xa0 | byte(len(s))}, s...) }
	arr := func(items ...[]byte) RawValue {
		out := []byte{0x90 | byte(len(items))}
		for _, it := range items {
			out = append(out, it...)
		}
		return out
	}
	mm := arr(str("img-1"), []byte{0x05}) // (identifier, offset)
	long := make([]byte, 300)
	for i := range long {
		long[i] = 'x'
	}
	str16 := append([]byte{0xda, 0x01, 0x2c}, long...)
	for _, tc := range []struct {
		name    string
		keys    RawValue
		adapter string
		want    string
	}{
		{"none", RawValue{0xc0}, "", ""},
		{"salt", arr(str("s1")), "", "s1"},
		{"adapter_only", arr(str("lora")), "lora", ""},
		{"adapter_and_salt", arr(str("lora"), str("s2")), "lora", "s2"},
		{"salt_equal_to_adapter", arr(str("a"), str("a")), "a", "a"},
		{"multimodal_then_salt", arr(mm, str("s3")), "", "s3"},
		{"multimodal_only", arr(mm), "", ""},
		{"embeds_after_salt", arr(str("s4"), []byte{0xc4, 0x02, 0x01, 0x02}), "", "s4"},
		{"long_salt", arr(str16), "", string(long)},
		{"truncated", RawValue{0x92, 0xa3, 'a'}, "", ""},
		{"empty", nil, "", ""},
		{"not_an_array", RawValue{0xa1, 'x'}, "", ""},
		{"array_claims_too_much", RawValue{0xdd, 0xff, 0xff, 0xff, 0xff}, "", ""},
	} {
		if got := CacheSalt(tc.keys, tc.adapter); got != tc.want {
			t.Errorf("%s: CacheSalt = %q, want %q", tc.name, got, tc.want)
		}
	}
}

// A key nested a million deep costs a salt lookup no recursion.
func TestCacheSaltDeepNesting(t *testing.T) {
	deep := make([]byte, 0, 1<<20+4)
	deep = append(deep, 0x92)
	for range 1 << 20 {
		deep = append(deep, 0x91)
	}
	deep = append(deep, 0xc0, 0xa1, 's')
	if got := CacheSalt(deep, ""); got != "s" {
		t.Errorf("CacheSalt = %q, want s", got)
	}
}
