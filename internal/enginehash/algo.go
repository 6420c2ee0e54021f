package enginehash

import "fmt"

// Algo is one of vLLM's --prefix-caching-hash-algo values.
type Algo uint8

// The four algorithms, in vLLM's order. SHA256 is vLLM's default.
const (
	SHA256 Algo = iota
	SHA256CBOR
	XXHash
	XXHashCBOR
)

var algoNames = [...]string{SHA256: "sha256", SHA256CBOR: "sha256_cbor", XXHash: "xxhash", XXHashCBOR: "xxhash_cbor"}

// Algos lists every algorithm.
var Algos = []Algo{SHA256, SHA256CBOR, XXHash, XXHashCBOR}

// ParseAlgo reads a --prefix-caching-hash-algo value. The empty string is
// vLLM's default, sha256.
func ParseAlgo(name string) (Algo, error) {
	if name == "" {
		return SHA256, nil
	}
	for a, n := range algoNames {
		if n == name {
			return Algo(a), nil
		}
	}
	return 0, fmt.Errorf("enginehash: unknown prefix caching hash algorithm %q (want sha256, sha256_cbor, xxhash or xxhash_cbor)", name)
}

// String returns the algorithm's name as vLLM spells it.
func (a Algo) String() string {
	if int(a) < len(algoNames) {
		return algoNames[a]
	}
	return fmt.Sprintf("Algo(%d)", uint8(a))
}

// Size is the length of the algorithm's digests in bytes: 32 for the
// sha256 pair, 16 for the xxhash pair.
func (a Algo) Size() int {
	if a == XXHash || a == XXHashCBOR {
		return 16
	}
	return 32
}

// cbor reports whether the algorithm serialises with CBOR rather than pickle.
func (a Algo) cbor() bool { return a == SHA256CBOR || a == XXHashCBOR }

func (a Algo) valid() bool { return int(a) < len(algoNames) }
