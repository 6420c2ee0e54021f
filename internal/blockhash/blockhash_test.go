package blockhash

import (
	"encoding/binary"
	"fmt"
	"slices"
	"testing"

	"github.com/zeebo/xxh3"

	"pgregory.net/rapid"
)

func TestBlockHashChain(t *testing.T) {
	seed := Seed("m", "", "")
	rapid.Check(t, func(t *rapid.T) {
		bs := rapid.IntRange(1, 32).Draw(t, "blockSize")
		toks := rapid.SliceOfN(rapid.IntRange(0, 1<<20), 0, 200).Draw(t, "tokens")
		all := Extend(nil, seed, toks, bs)
		if len(all) != len(toks)/bs {
			t.Fatalf("%d hashes for %d tokens of block size %d", len(all), len(toks), bs)
		}
		// A prefix hashes the same alone as inside the longer prompt, and
		// extending in steps equals hashing at once.
		cut := rapid.IntRange(0, len(toks)).Draw(t, "cut")
		head := Extend(nil, seed, toks[:cut], bs)
		if !slices.Equal(head, all[:len(head)]) {
			t.Fatalf("prefix of %d tokens hashes differently alone", cut)
		}
		if got := Extend(head, seed, toks, bs); !slices.Equal(got, all) {
			t.Fatalf("extending in steps differs")
		}
		// A changed token changes its block and every later one, never an
		// earlier one.
		if len(toks) == 0 {
			return
		}
		i := rapid.IntRange(0, len(toks)-1).Draw(t, "changed")
		mod := slices.Clone(toks)
		mod[i]++
		other := Extend(nil, seed, mod, bs)
		for b := range all {
			changed := other[b] != all[b]
			if want := b >= i/bs; changed != want {
				t.Fatalf("token %d changed: block %d changed=%v, want %v", i, b, changed, want)
			}
		}
	})
}

func TestChainSeedSalts(t *testing.T) {
	seeds := map[Hash]string{}
	for _, c := range [][3]string{{"m", "", ""}, {"m2", "", ""}, {"m", "a", ""}, {"m", "", "a"}, {"m", "a", "b"}, {"m", "ab", ""}} {
		s := Seed(c[0], c[1], c[2])
		if prev, ok := seeds[s]; ok {
			t.Errorf("Seed%v equals Seed of %s", c, prev)
		}
		seeds[s] = c[0] + "/" + c[1] + "/" + c[2]
	}
}

// BenchmarkExtendBlockHashes hashes a prompt of 8,192 tokens; ns/block is
// the cost of one block.
func BenchmarkExtendBlockHashes(b *testing.B) {
	toks := make([]int, 8192)
	for i := range toks {
		toks[i] = i * 7
	}
	seed := Seed("m", "", "")
	for _, bs := range []int{16, 32} {
		b.Run(fmt.Sprintf("block=%d", bs), func(b *testing.B) {
			n := len(toks) / bs
			dst := make([]Hash, 0, n)
			b.ReportAllocs()
			for b.Loop() {
				dst = Extend(dst[:0], seed, toks, bs)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/block")
		})
	}
}

// TestBlockHash16 checks the block size 16 path, which computes XXH3-128
// without writing the block out, against xxh3.Hash128 of the written bytes.
func TestBlockHash16(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		seed := Hash{rapid.Uint64().Draw(t, "hi"), rapid.Uint64().Draw(t, "lo")}
		toks := rapid.SliceOfN(rapid.OneOf(rapid.IntRange(0, 1<<18), rapid.IntRange(0, 1<<32-1)), 0, 100).Draw(t, "tokens")
		got := Extend(nil, seed, toks, 16)
		parent := seed
		for i, h := range got {
			buf := binary.LittleEndian.AppendUint64(nil, parent.Hi)
			buf = binary.LittleEndian.AppendUint64(buf, parent.Lo)
			for _, tok := range toks[16*i : 16*i+16] {
				buf = binary.LittleEndian.AppendUint32(buf, uint32(tok))
			}
			want := xxh3.Hash128(buf)
			if h != (Hash{want.Hi, want.Lo}) {
				t.Fatalf("block %d: %v, want %x%x", i, h, want.Hi, want.Lo)
			}
			parent = h
		}
	})
}

// TestBlockHashPinned pins hash values, computed before block size 16 got
// its own path: a change of how blocks are hashed would make gateways and
// simulators of different versions disagree, so it must be deliberate.
func TestBlockHashPinned(t *testing.T) {
	toks := make([]int, 40)
	for i := range toks {
		toks[i] = i * 1000
	}
	seed := Seed("m", "", "")
	for _, tt := range []struct {
		blockSize int
		want      string
	}{
		{16, "[9656cdca019850e1aa1bfe8fb1d712ba 7871b45fda9f786e60246d8a05d2e72f]"},
		{32, "[cc708246a5b206c60cda7ce398e99a8d]"},
		{3, "[aa28bb1418afa1936598b7dee4d5879b 396a1fba2a0ba571c308a505fcedd38f 8d5a75b8bd2199f00a3e018b161ef93e " +
			"3fa25d14ac30b5358f7f84e078f2f6c1 cf4b0f260ceb3b40617a8b935119c261 4dbb93f2234352711cbebe690700966d " +
			"86c539f7720b3fc04a74eddf5f2e0a5d 1344d881c2cb108ce8b6763cc796931b 147eb4975fb336d37e43759454950ce8 " +
			"a4cfd0101c3f684c58ad54ca8b194108 6f0a86394f578f61f781b540f0067397 c1beb57afc2cd6e07c5b72e1c9139446 " +
			"20dc87c3557dd840ba0c2d70ebed50ea]"},
	} {
		if got := fmt.Sprint(Extend(nil, seed, toks, tt.blockSize)); got != tt.want {
			t.Errorf("block size %d: hashes %s, want %s", tt.blockSize, got, tt.want)
		}
	}
}

// TestNextIsExtend: hashing one block at a time with Next gives Extend's
// chain, for the block sizes engines use and past Next's stack buffer.
func TestNextIsExtend(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		bs := rapid.SampledFrom([]int{1, 16, 32, 256, 300}).Draw(t, "blockSize")
		toks := rapid.SliceOfN(rapid.IntRange(0, 1<<31-1), 0, 3*bs).Draw(t, "tokens")
		seed := Seed("m", "", rapid.StringN(0, 4, -1).Draw(t, "salt"))
		want := Extend(nil, seed, toks, bs)
		parent := seed
		for i, h := range want {
			block := make([]uint32, bs)
			for j := range block {
				block[j] = uint32(toks[i*bs+j])
			}
			parent = Next(parent, block)
			if parent != h {
				t.Fatalf("block %d: Next %v, Extend %v", i, parent, h)
			}
		}
	})
}

// TestParseRoundTrip: String and Parse are inverses, and Parse refuses
// anything but 32 hex digits.
func TestParseRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		h := Hash{Hi: rapid.Uint64().Draw(t, "hi"), Lo: rapid.Uint64().Draw(t, "lo")}
		got, err := Parse(h.String())
		if err != nil || got != h {
			t.Fatalf("Parse(%q) = %v, %v; want %v", h.String(), got, err, h)
		}
	})
	for _, bad := range []string{"", "00", "0123456789abcdef0123456789abcdeg", "0123456789abcdef0123456789abcdef0", " 123456789abcdef0123456789abcdef"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) succeeded, want an error", bad)
		}
	}
}
