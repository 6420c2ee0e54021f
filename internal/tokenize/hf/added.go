package hf

import (
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// addedToken is one entry of tokenizer.json's added_tokens (or one that
// tokenizer_config.json adds).
type addedToken struct {
	content    string
	singleWord bool
	lstrip     bool
	rstrip     bool
	normalized bool
	special    bool
}

// addedVocab is tokenizers' AddedVocabulary: tokens cut out of the text before
// the model sees it. Tokens with normalized=false are found in the raw text;
// the rest are found, in their normalized form, in the normalized text between
// them. Matching is leftmost-longest through a byte trie.
type addedVocab struct {
	byID      map[int32]*addedToken
	byContent map[string]int32
	special   map[string]bool // contents ever added as special
	decodeAs  map[int32]string
	raw       *addedTrie // normalized=false tokens; nil if none
	norm      *addedTrie // normalized=true tokens; nil if none
	// encodeSpecial is transformers' split_special_tokens: special tokens
	// are not cut out (they still occupy their matches, as in tokenizers).
	encodeSpecial bool
}

func newAddedVocab() *addedVocab {
	return &addedVocab{
		byID:      map[int32]*addedToken{},
		byContent: map[string]int32{},
		special:   map[string]bool{},
		decodeAs:  map[int32]string{},
	}
}

// add is AddedVocabulary::add_tokens: a token whose content already has an
// id (an added token, else the model's vocabulary) takes it, otherwise the
// next free id past the model's vocabulary. vocabSize is the model's vocab
// size, lookup its token-to-id function.
func (v *addedVocab) add(toks []addedToken, vocabSize int, lookup func(string) (int32, bool), n normalizer) {
	next := int32(vocabSize)
	if len(v.byID) > 0 {
		maxID := int32(-1)
		for id := range v.byID {
			maxID = max(maxID, id)
		}
		if maxID >= int32(vocabSize) || vocabSize == 0 {
			next = maxID + 1
		}
	}
	for _, t := range toks {
		if t.content == "" {
			continue
		}
		if id, ok := v.byContent[t.content]; ok && *v.byID[id] == t {
			continue
		}
		id, ok := v.byContent[t.content]
		if !ok {
			id, ok = lookup(t.content)
		}
		if !ok {
			id = next
			next++
		}
		if t.normalized && n != nil {
			if s := n.normalize(t.content); s != t.content {
				v.decodeAs[id] = s
			}
		}
		v.byContent[t.content] = id
		if t.special {
			v.special[t.content] = true
		}
		tok := t
		v.byID[id] = &tok
	}
	v.rebuild()
}

// rebuild makes the two tries from the current tokens.
func (v *addedVocab) rebuild() {
	v.raw, v.norm = nil, nil
	ids := make([]int32, 0, len(v.byID))
	for id := range v.byID {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		t := v.byID[id]
		if t.normalized {
			pat := t.content
			if s, ok := v.decodeAs[id]; ok {
				pat = s
			}
			if v.norm == nil {
				v.norm = newAddedTrie()
			}
			v.norm.insert(pat, id)
		} else {
			if v.raw == nil {
				v.raw = newAddedTrie()
			}
			v.raw.insert(t.content, id)
		}
	}
}

// span is a range of a string, cut out as added token id, or text if id < 0.
type span struct {
	start, end int
	id         int32
}

// findMatches is AddedVocabulary::find_matches: it appends to dst the spans
// covering s, added tokens and the text between them, honouring
// single_word, lstrip and rstrip. Empty spans, of text or of a token, are
// left out, as tokenizers drops empty splits.
func (v *addedVocab) findMatches(dst []span, s string, trie *addedTrie) []span {
	if trie == nil {
		if s != "" {
			dst = append(dst, span{0, len(s), -1})
		}
		return dst
	}
	startOffset := 0
	for i := 0; i < len(s); {
		start, stop, id := trie.next(s, i)
		if id < 0 {
			break
		}
		i = stop
		t := v.byID[id]
		if v.encodeSpecial && v.special[t.content] {
			continue
		}
		if t.singleWord {
			startSpace := start == 0 || !endsWithWord(s[:start])
			stopSpace := stop == len(s) || !startsWithWord(s[stop:])
			if !startSpace || !stopSpace {
				continue
			}
		}
		if t.lstrip {
			start = max(trailingSpaceStart(s[:start]), startOffset)
		}
		if t.rstrip {
			stop += leadingSpaceLen(s[stop:])
		}
		if startOffset < start {
			dst = append(dst, span{startOffset, start, -1})
		}
		// A previous match's rstrip can leave lstrip nothing of this one;
		// tokenizers drops the empty split, token and all.
		if start < stop {
			dst = append(dst, span{start, stop, id})
		}
		startOffset = stop
	}
	if startOffset < len(s) {
		dst = append(dst, span{startOffset, len(s), -1})
	}
	return dst
}

// isWordChar is the Unicode \w of Rust's regex crate: Alphabetic, marks,
// decimal digits, connector punctuation and the joiners.
func isWordChar(r rune) bool {
	if unicode.Is(regexUnassigned, r) {
		return false
	}
	return unicode.IsLetter(r) || unicode.IsMark(r) || unicode.Is(unicode.Nd, r) ||
		unicode.Is(unicode.Pc, r) || unicode.Is(unicode.Nl, r) ||
		unicode.Is(unicode.Other_Alphabetic, r) || unicode.Is(unicode.Join_Control, r)
}

func endsWithWord(s string) bool {
	r, n := utf8.DecodeLastRuneInString(s)
	return n > 0 && isWordChar(r)
}

func startsWithWord(s string) bool {
	r, n := utf8.DecodeRuneInString(s)
	return n > 0 && isWordChar(r)
}

// trailingSpaceStart is where the whitespace at the end of s begins.
func trailingSpaceStart(s string) int {
	i := len(s)
	for i > 0 {
		r, n := utf8.DecodeLastRuneInString(s[:i])
		if !unicode.IsSpace(r) {
			break
		}
		i -= n
	}
	return i
}

// leadingSpaceLen is the length of the whitespace at the start of s.
func leadingSpaceLen(s string) int {
	i := 0
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		if !unicode.IsSpace(r) {
			break
		}
		i += n
	}
	return i
}

// addedTrie is a byte trie of added-token texts. The root's children are a
// 256-entry table: the first-byte index that lets text without any token's
// first byte be skipped a byte at a time.
type addedTrie struct {
	first [256]int32 // child of the root per byte; 0 = none
	nodes []trieNode // nodes[0] is the root
	// firsts counts the bytes tokens start with; when it is 1 (all of
	// Qwen3's and Llama 3's start with '<'), next jumps to firstByte with
	// strings.IndexByte.
	firsts    int
	firstByte byte
}

type trieNode struct {
	id     int32 // token ending here, -1 if none
	labels []byte
	kids   []int32
}

func newAddedTrie() *addedTrie {
	return &addedTrie{nodes: []trieNode{{id: -1}}}
}

func (t *addedTrie) insert(s string, id int32) {
	if s == "" {
		return
	}
	cur := t.first[s[0]]
	if cur == 0 {
		cur = t.newNode()
		t.first[s[0]] = cur
		t.firsts++
		t.firstByte = s[0]
	}
	for i := 1; i < len(s); i++ {
		next := t.child(cur, s[i])
		if next == 0 {
			next = t.newNode()
			n := &t.nodes[cur]
			j := sort.Search(len(n.labels), func(k int) bool { return n.labels[k] >= s[i] })
			n.labels = append(n.labels, 0)
			copy(n.labels[j+1:], n.labels[j:])
			n.labels[j] = s[i]
			n.kids = append(n.kids, 0)
			copy(n.kids[j+1:], n.kids[j:])
			n.kids[j] = next
		}
		cur = next
	}
	t.nodes[cur].id = id
}

func (t *addedTrie) newNode() int32 {
	t.nodes = append(t.nodes, trieNode{id: -1})
	return int32(len(t.nodes) - 1)
}

func (t *addedTrie) child(n int32, c byte) int32 {
	node := &t.nodes[n]
	labels := node.labels
	if len(labels) <= 8 {
		for k, l := range labels {
			if l == c {
				return node.kids[k]
			}
		}
		return 0
	}
	k := sort.Search(len(labels), func(k int) bool { return labels[k] >= c })
	if k < len(labels) && labels[k] == c {
		return node.kids[k]
	}
	return 0
}

// next finds the leftmost-longest match in s at or after i: the earliest
// start, and the longest token there. id is -1 when there is none.
func (t *addedTrie) next(s string, i int) (start, end int, id int32) {
	if t.firsts == 1 {
		for i < len(s) {
			k := strings.IndexByte(s[i:], t.firstByte)
			if k < 0 {
				break
			}
			i += k
			if end, id := t.longestAt(s, i); id >= 0 {
				return i, end, id
			}
			i++
		}
		return len(s), len(s), -1
	}
	for ; i < len(s); i++ {
		if t.first[s[i]] == 0 {
			continue
		}
		if end, id := t.longestAt(s, i); id >= 0 {
			return i, end, id
		}
	}
	return len(s), len(s), -1
}

// longestAt returns the end and id of the longest token at s[i:], or id -1.
func (t *addedTrie) longestAt(s string, i int) (end int, id int32) {
	cur := t.first[s[i]]
	if cur == 0 {
		return i, -1
	}
	best, bestEnd := t.nodes[cur].id, i+1
	for j := i + 1; j < len(s); j++ {
		cur = t.child(cur, s[j])
		if cur == 0 {
			break
		}
		if id := t.nodes[cur].id; id >= 0 {
			best, bestEnd = id, j+1
		}
	}
	return bestEnd, best
}
