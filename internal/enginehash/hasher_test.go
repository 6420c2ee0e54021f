package enginehash

import (
	"bytes"
	"fmt"
	"slices"
	"sync"
	"testing"

	"pgregory.net/rapid"
)

func TestParseAlgo(t *testing.T) {
	for _, a := range Algos {
		got, err := ParseAlgo(a.String())
		if err != nil || got != a {
			t.Errorf("ParseAlgo(%q) = %v, %v", a.String(), got, err)
		}
	}
	if a, err := ParseAlgo(""); err != nil || a != SHA256 {
		t.Errorf(`ParseAlgo("") = %v, %v; want the default sha256`, a, err)
	}
	for _, bad := range []string{"SHA256", "xxh3", "sha256_cbor_64bit", "builtin"} {
		if _, err := ParseAlgo(bad); err == nil {
			t.Errorf("ParseAlgo(%q) accepted", bad)
		}
	}
}

func TestRandomSeed(t *testing.T) {
	for _, a := range Algos {
		h1, h2 := New(a, RandomSeed()), New(a, SeedFromEnv("", false))
		if len(h1.NoneHash()) != 32 || bytes.Equal(h1.NoneHash(), h2.NoneHash()) {
			t.Errorf("%v: random NONE_HASHes %x and %x", a, h1.NoneHash(), h2.NoneHash())
		}
		// A chain from a random seed: the first parent is 32 bytes whatever
		// the digest size; NoneHashSeed reproduces it.
		h3 := New(a, NoneHashSeed(h1.NoneHash()))
		toks := seq(1, 8)
		if c1, c3 := h1.AppendChain(nil, toks, 4, Request{}), h3.AppendChain(nil, toks, 4, Request{}); !bytes.Equal(c1, c3) || len(c1) != 2*a.Size() {
			t.Errorf("%v: NoneHashSeed chain %x, want %x", a, c3, c1)
		}
	}
	if got := SeedFromEnv("", true); got.String() != `PYTHONHASHSEED=""` {
		t.Errorf("set but empty PYTHONHASHSEED reads as %v", got)
	}
}

func TestRequestExtraKeys(t *testing.T) {
	for _, tc := range []struct {
		r      Request
		block0 ExtraKeys
		block1 ExtraKeys
	}{
		{Request{}, nil, nil},
		{Request{LoRA: "l"}, ExtraKeys{"l"}, ExtraKeys{"l"}},
		{Request{CacheSalt: "s"}, ExtraKeys{"s"}, nil},
		{Request{LoRA: "l", CacheSalt: "s"}, ExtraKeys{"l", "s"}, ExtraKeys{"l"}},
	} {
		if got := tc.r.ExtraKeys(0); !slices.Equal(got, tc.block0) {
			t.Errorf("%+v block 0: %q, want %q", tc.r, got, tc.block0)
		}
		if got := tc.r.ExtraKeys(1); !slices.Equal(got, tc.block1) {
			t.Errorf("%+v block 1: %q, want %q", tc.r, got, tc.block1)
		}
	}
}

func TestEventInt(t *testing.T) {
	d := unhex(t, "bea72b7d33de03c1aa715efbb492d0e0d3801f00c1f985756896072ae8b31325")
	if got := EventInt(d); got != 7536218907325174565 {
		t.Errorf("EventInt = %d", got)
	}
	if got := EventInt([]byte{1, 2}); got != 0x0102 {
		t.Errorf("EventInt of 2 bytes = %#x", got)
	}
}

// TestChainProperties: a changed token changes its block's hash and every
// later block's, never an earlier one; a chain resumed from a prefix's
// digests equals the chain hashed at once; an empty parent is NONE_HASH.
func TestChainProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		algo := rapid.SampledFrom(Algos).Draw(t, "algo")
		h := New(algo, PythonHashSeed(rapid.SampledFrom([]string{"0", "42", "random"}).Draw(t, "seed")))
		bs := rapid.IntRange(1, 20).Draw(t, "blockSize")
		toks := rapid.SliceOfN(rapid.Uint32(), 1, 120).Draw(t, "tokens")
		r := Request{
			LoRA:      rapid.SampledFrom([]string{"", "a", "lora-x"}).Draw(t, "lora"),
			CacheSalt: rapid.SampledFrom([]string{"", "a", "salt"}).Draw(t, "salt"),
		}
		size := algo.Size()
		all := h.AppendChain(nil, toks, bs, r)
		if len(all) != len(toks)/bs*size {
			t.Fatalf("%d digest bytes for %d tokens of block size %d", len(all), len(toks), bs)
		}
		cut := rapid.IntRange(0, len(toks)).Draw(t, "cut")
		head := h.AppendChain(nil, toks[:cut], bs, r)
		if !bytes.Equal(head, all[:len(head)]) {
			t.Fatalf("prefix of %d tokens hashes differently alone", cut)
		}
		if got := h.AppendChain(head, toks, bs, r); !bytes.Equal(got, all) {
			t.Fatalf("resumed chain differs")
		}
		if len(all) > 0 && !bytes.Equal(h.Block(nil, []byte{}, toks[:bs], r.ExtraKeys(0)), all[:size]) {
			t.Fatalf("empty parent is not NONE_HASH")
		}
		k := rapid.IntRange(0, len(toks)-1).Draw(t, "changed")
		changed := slices.Clone(toks)
		changed[k] ^= 1 + rapid.Uint32Range(0, 1<<31-2).Draw(t, "xor")
		other := algo.Digests(h.AppendChain(nil, changed, bs, r))
		for i, d := range algo.Digests(all) {
			if same := bytes.Equal(d, other[i]); same != (i < k/bs) {
				t.Fatalf("token %d changed: block %d same=%v", k, i, same)
			}
		}
	})
}

func TestConcurrentUse(t *testing.T) {
	for _, a := range Algos {
		h := New(a, PythonHashSeed("0"))
		toks := seq(1, 4096)
		want := h.AppendChain(nil, toks, 16, Request{LoRA: "l", CacheSalt: "s"})
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for range 20 {
					got := h.AppendChain(nil, toks, 16, Request{LoRA: "l", CacheSalt: "s"})
					if !bytes.Equal(got, want) {
						t.Errorf("%v: concurrent chain differs", a)
						return
					}
				}
			})
		}
		wg.Wait()
	}
}

func TestBlockDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under the race detector")
	}
	for _, a := range Algos {
		h := New(a, PythonHashSeed("0"))
		toks, dst := seq(1, 16), make([]byte, 0, 32)
		extra := ExtraKeys{"lora", "salt"}
		h.Block(dst, nil, toks, extra) // warm the pool
		if n := testing.AllocsPerRun(100, func() { h.Block(dst[:0], nil, toks, extra) }); n != 0 {
			t.Errorf("%v: Block allocates %v times", a, n)
		}
		chain := make([]byte, 0, 64*a.Size())
		all := seq(1, 1024)
		if n := testing.AllocsPerRun(20, func() { h.AppendChain(chain[:0], all, 16, Request{LoRA: "l", CacheSalt: "s"}) }); n != 0 {
			t.Errorf("%v: AppendChain allocates %v times", a, n)
		}
	}
}

// BenchmarkBlock measures block hashes per second for 16-token blocks of
// vocabulary-sized ids, chained as a request's prompt is.
func BenchmarkBlock(b *testing.B) {
	for _, bs := range []int{16, 256} {
		for _, a := range Algos {
			b.Run(fmt.Sprintf("%v/tokens=%d", a, bs), func(b *testing.B) {
				h := New(a, PythonHashSeed("0"))
				toks := make([]uint32, bs)
				for i := range toks {
					toks[i] = uint32(i*7919) % 151936
				}
				parent := h.Block(nil, nil, toks, nil)
				dst := make([]byte, 0, 32)
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					dst = h.Block(dst[:0], parent, toks, nil)
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "blocks/s")
			})
		}
	}
}
