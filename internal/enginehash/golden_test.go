// The goldens in testdata/goldens.json come from the reference stack
// (CPython 3.11's pickle, cbor2, xxhash; pinned in
// scripts/goldens/requirements.txt) running vLLM's hash functions as vLLM
// writes them. Regenerate them with
//
//	python3 scripts/goldens/enginehash_goldens.py
//
// which builds its own venv (.venv/goldens). These tests need no Python.

package enginehash

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"testing"
)

type goldenChain struct {
	Algo      string   `json:"algo"`
	Seed      *string  `json:"seed"`
	NoneHash  string   `json:"none_hash"`
	BlockSize int      `json:"block_size"`
	LoRA      string   `json:"lora"`
	CacheSalt string   `json:"cache_salt"`
	Tokens    []uint32 `json:"tokens"`
	Digests   []string `json:"digests"`
	EventInts []uint64 `json:"event_ints"`
}

type goldenEncoding struct {
	Name         string    `json:"name"`
	Parent       string    `json:"parent"`
	Tokens       []uint32  `json:"tokens"`
	TokenRange   []uint32  `json:"token_range"`
	Extra        ExtraKeys `json:"extra"`
	PickleSHA256 string    `json:"pickle_sha256"`
	CBORSHA256   string    `json:"cbor_sha256"`
	Pickle       string    `json:"pickle"`
}

type goldens struct {
	Python    string           `json:"python"`
	CBOR2     string           `json:"cbor2"`
	XXHash    string           `json:"xxhash"`
	Chains    []goldenChain    `json:"chains"`
	Encodings []goldenEncoding `json:"encodings"`
}

func loadGoldens(t *testing.T) goldens {
	t.Helper()
	raw, err := os.ReadFile("testdata/goldens.json")
	if err != nil {
		t.Fatal(err)
	}
	var g goldens
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	if len(g.Chains) == 0 || len(g.Encodings) == 0 {
		t.Fatal("goldens.json holds no cases")
	}
	return g
}

func (c goldenChain) name(i int) string {
	seed := "random"
	if c.Seed != nil {
		seed = fmt.Sprintf("%q", *c.Seed)
	}
	return fmt.Sprintf("%d/%s/seed=%s/bs=%d/lora=%.10q/salt=%.10q/%d tokens", i, c.Algo, seed, c.BlockSize, c.LoRA, c.CacheSalt, len(c.Tokens))
}

// TestGoldenChains hashes every golden request and compares NONE_HASH, each
// block digest and each event int.
func TestGoldenChains(t *testing.T) {
	g := loadGoldens(t)
	t.Logf("goldens from Python %s, cbor2 %s, xxhash %s", g.Python, g.CBOR2, g.XXHash)
	for i, c := range g.Chains {
		algo, err := ParseAlgo(c.Algo)
		if err != nil {
			t.Fatal(err)
		}
		seed := NoneHashSeed(unhex(t, c.NoneHash))
		if c.Seed != nil {
			seed = PythonHashSeed(*c.Seed)
		}
		h := New(algo, seed)
		if got := hex.EncodeToString(h.NoneHash()); got != c.NoneHash {
			t.Errorf("%s: NONE_HASH %s, want %s", c.name(i), got, c.NoneHash)
			continue
		}
		r := Request{LoRA: c.LoRA, CacheSalt: c.CacheSalt}
		chain := h.AppendChain(nil, c.Tokens, c.BlockSize, r)
		got := algo.Digests(chain)
		if len(got) != len(c.Digests) {
			t.Errorf("%s: %d digests, want %d", c.name(i), len(got), len(c.Digests))
			continue
		}
		for j := range got {
			if hex.EncodeToString(got[j]) != c.Digests[j] {
				t.Errorf("%s: block %d = %x, want %s", c.name(i), j, got[j], c.Digests[j])
				break
			}
		}
		ints := algo.AppendEventInts(nil, chain)
		for j := range ints {
			if ints[j] != c.EventInts[j] {
				t.Errorf("%s: block %d event int %d, want %d", c.name(i), j, ints[j], c.EventInts[j])
				break
			}
		}
	}
}

func (e goldenEncoding) tokens() []uint32 {
	if e.TokenRange == nil {
		return e.Tokens
	}
	out := make([]uint32, e.TokenRange[1])
	for i := range out {
		out[i] = e.TokenRange[0] + uint32(i)
	}
	return out
}

// TestGoldenEncodings compares the serialisations themselves, including the
// cases vLLM rarely reaches: frames split at 64 KiB, unframed payloads of
// 64 KiB and more, shared one-character strings, ints past 2^31.
func TestGoldenEncodings(t *testing.T) {
	g := loadGoldens(t)
	for _, e := range g.Encodings {
		parent, toks := unhex(t, e.Parent), e.tokens()
		var p pickler
		p.reset(nil)
		p.block(parent, toks, e.Extra)
		if e.Pickle != "" && !bytes.Equal(p.buf, unhex(t, e.Pickle)) {
			t.Errorf("%s: pickle\n got %x\nwant %s", e.Name, p.buf, e.Pickle)
		} else if sum := sha256.Sum256(p.buf); hex.EncodeToString(sum[:]) != e.PickleSHA256 {
			t.Errorf("%s: pickle of %d bytes has sha256 %x, want %s", e.Name, len(p.buf), sum, e.PickleSHA256)
		}
		enc := appendCBORBlock(nil, parent, toks, e.Extra)
		if sum := sha256.Sum256(enc); hex.EncodeToString(sum[:]) != e.CBORSHA256 {
			t.Errorf("%s: cbor of %d bytes has sha256 %x, want %s", e.Name, len(enc), sum, e.CBORSHA256)
		}
	}
}
