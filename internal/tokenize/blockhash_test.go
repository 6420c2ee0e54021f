package tokenize

import (
	"slices"
	"testing"

	"pgregory.net/rapid"
)

func TestBlockHashChain(t *testing.T) {
	seed := ChainSeed("m", "", "")
	rapid.Check(t, func(t *rapid.T) {
		bs := rapid.IntRange(1, 32).Draw(t, "blockSize")
		toks := rapid.SliceOfN(rapid.IntRange(0, 1<<20), 0, 200).Draw(t, "tokens")
		all := ExtendBlockHashes(nil, seed, toks, bs)
		if len(all) != len(toks)/bs {
			t.Fatalf("%d hashes for %d tokens of block size %d", len(all), len(toks), bs)
		}
		// A prefix hashes the same alone as inside the longer prompt, and
		// extending in steps equals hashing at once.
		cut := rapid.IntRange(0, len(toks)).Draw(t, "cut")
		head := ExtendBlockHashes(nil, seed, toks[:cut], bs)
		if !slices.Equal(head, all[:len(head)]) {
			t.Fatalf("prefix of %d tokens hashes differently alone", cut)
		}
		if got := ExtendBlockHashes(head, seed, toks, bs); !slices.Equal(got, all) {
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
		other := ExtendBlockHashes(nil, seed, mod, bs)
		for b := range all {
			changed := other[b] != all[b]
			if want := b >= i/bs; changed != want {
				t.Fatalf("token %d changed: block %d changed=%v, want %v", i, b, changed, want)
			}
		}
	})
}

func TestChainSeedSalts(t *testing.T) {
	seeds := map[BlockHash]string{}
	for _, c := range [][3]string{{"m", "", ""}, {"m2", "", ""}, {"m", "a", ""}, {"m", "", "a"}, {"m", "a", "b"}, {"m", "ab", ""}} {
		s := ChainSeed(c[0], c[1], c[2])
		if prev, ok := seeds[s]; ok {
			t.Errorf("ChainSeed%v equals ChainSeed of %s", c, prev)
		}
		seeds[s] = c[0] + "/" + c[1] + "/" + c[2]
	}
}

func BenchmarkExtendBlockHashes(b *testing.B) {
	toks := make([]int, 16*512)
	for i := range toks {
		toks[i] = i * 7
	}
	seed := ChainSeed("m", "", "")
	dst := make([]BlockHash, 0, 512)
	b.ReportAllocs()
	for b.Loop() {
		dst = ExtendBlockHashes(dst[:0], seed, toks, 16)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/512, "ns/block")
}
