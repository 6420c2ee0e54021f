package events

import "github.com/tinylib/msgp/msgp"

// CacheSalt returns the cache_salt among the extra keys vLLM hashed into a
// sequence's first block, or "" when there is none. vLLM builds those keys
// as the adapter name (when the request uses an adapter), then multimodal
// entries (tuples), then the salt (a string), then prompt-embedding
// digests (bytes); so the salt is the last string that is not the adapter
// name in first place. keys is one entry of Event.ExtraKeys; anything that
// does not read as such a tuple has no salt.
func CacheSalt(keys RawValue, adapter string) string {
	n, rest, err := msgp.ReadArrayHeaderBytes(keys)
	if err != nil {
		return ""
	}
	salt := ""
	for i := range n {
		if msgp.NextType(rest) != msgp.StrType {
			// The decoder's skip: it does not recurse, however deep a
			// hostile key nests.
			d := decoder{all: rest, rest: rest, event: -1}
			if d.skipN(1) != nil {
				return ""
			}
			rest = d.rest
			continue
		}
		var s string
		if s, rest, err = msgp.ReadStringBytes(rest); err != nil {
			return ""
		}
		if i > 0 || adapter == "" || s != adapter {
			salt = s
		}
	}
	return salt
}
