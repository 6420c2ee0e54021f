package enginehash

import (
	"bytes"
	"encoding/hex"
	"strings"
	"testing"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func seq(from, to uint32) []uint32 {
	var out []uint32
	for v := from; v <= to; v++ {
		out = append(out, v)
	}
	return out
}

// TestSpecVectors checks the table of vllm-spec.md §4.3: PYTHONHASHSEED="0",
// block size 16, tokens 1..16 then 17..32, no extra keys.
func TestSpecVectors(t *testing.T) {
	for _, tc := range []struct {
		algo                 Algo
		none, block1, block2 string
		event1, event2       uint64
	}{
		{SHA256, "1973e23848344dc43a988a9b478663803cfffe1243480253f9a3cf004b14aa7c",
			"bea72b7d33de03c1aa715efbb492d0e0d3801f00c1f985756896072ae8b31325",
			"2744667f6645310ff670b0c5d7c64987ffa5940de5a549f17d92dcbb5b559e31",
			7536218907325174565, 9048537298590080561},
		{SHA256CBOR, "4e1195df020de59e0d65a33a4279f1183e7ae4e5d980e309f8b55adff2e61c3e",
			"202da172482d928bbc42ab25b0151e2b895f13f41002e27b2ceabcfae6d332ea",
			"4a0a393805c6d2f0ed831000d41bb65980336c4c04895d5e26470bbec927f5bf",
			3236607068019569386, 2758186210834249151},
		{XXHash, "6fb31cc38bba6066183f7f2104b9c051",
			"6ba7d7fc1608e5f0a4612b1b0c87458f",
			"dbd92304eaa08219c5cf8f4ce18166b6",
			11844795890135418255, 14253768906014549686},
		{XXHashCBOR, "1ebe36576dcb573f26b99533a20aaeca",
			"c2d7a75070fc6d6b0c3fb0af456c1009",
			"93add93233ea572fb2e2b1685bac6f8d",
			882618318818381833, 12890060145260523405},
	} {
		t.Run(tc.algo.String(), func(t *testing.T) {
			h := New(tc.algo, PythonHashSeed("0"))
			if got := hex.EncodeToString(h.NoneHash()); got != tc.none {
				t.Errorf("NONE_HASH = %s, want %s", got, tc.none)
			}
			chain := h.AppendChain(nil, seq(1, 32), 16, Request{})
			d := tc.algo.Digests(chain)
			if len(d) != 2 {
				t.Fatalf("%d digests, want 2", len(d))
			}
			if got := hex.EncodeToString(d[0]); got != tc.block1 {
				t.Errorf("block 1 = %s, want %s", got, tc.block1)
			}
			if got := hex.EncodeToString(d[1]); got != tc.block2 {
				t.Errorf("block 2 = %s, want %s", got, tc.block2)
			}
			ints := tc.algo.AppendEventInts(nil, chain)
			if ints[0] != tc.event1 || ints[1] != tc.event2 {
				t.Errorf("event ints = %d, want [%d %d]", ints, tc.event1, tc.event2)
			}
			// Block by block gives the same chain.
			b1 := h.Block(nil, nil, seq(1, 16), nil)
			b2 := h.Block(nil, b1, seq(17, 32), nil)
			if !bytes.Equal(append(b1, b2...), chain) {
				t.Errorf("Block chain %x differs from AppendChain %x", append(b1, b2...), chain)
			}
		})
	}
}

func picklePrint(f func(p *pickler)) []byte {
	var p pickler
	p.reset(nil)
	f(&p)
	return p.buf
}

// TestSpecEncodings checks the serialisations of vllm-spec.md §4.2.
func TestSpecEncodings(t *testing.T) {
	ones := bytes.Repeat([]byte{1}, 32)
	onesHex := strings.Repeat("01", 32)
	none := New(SHA256CBOR, PythonHashSeed("0")).NoneHash()
	for _, tc := range []struct {
		name string
		got  []byte
		want string
	}{
		{"pickle str", picklePrint(func(p *pickler) { p.string("0") }), "80059505000000000000008c0130942e"},
		{"pickle ints", picklePrint(func(p *pickler) { p.block(ones, []uint32{255, 256, 65535, 65536, 151643}, nil) }),
			"8005953c000000000000004320" + onesHex + "94284bff4d00014dffff4a000001004a5b50020074944e87942e"},
		{"pickle lora", picklePrint(func(p *pickler) { p.block(ones, []uint32{1, 2}, ExtraKeys{"my-lora"}) }),
			"800595380000000000000043200" + "1" + onesHex[2:] + "944b014b0286948c076d792d6c6f726194859487942e"},
		{"cbor block", appendCBORBlock(nil, none, seq(1, 16), nil),
			"83 5820 4e1195df020de59e0d65a33a4279f1183e7ae4e5d980e309f8b55adff2e61c3e 90 0102030405060708090a0b0c0d0e0f10 f6"},
		{"cbor str", appendCBORString(nil, "0"), "6130"},
	} {
		if want := unhex(t, tc.want); !bytes.Equal(tc.got, want) {
			t.Errorf("%s:\n got %x\nwant %x", tc.name, tc.got, want)
		}
	}
}
