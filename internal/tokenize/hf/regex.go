package hf

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlclark/regexp2"
)

// matcher finds the non-overlapping matches of a Split or Replace pattern,
// left to right, as Oniguruma's find_iter does in tokenizers.
type matcher interface {
	// find appends the [start, end) byte ranges of the matches in s to dst.
	// Once stop is set (nil never is) it may return early with only the
	// first matches: its caller is giving up on s.
	find(dst [][2]int, s string, stop *atomic.Bool) [][2]int
}

// halted reports whether stop is set, looked at only every stopEvery
// steps (step counts them) so that a long scan does not pay for it.
func halted(stop *atomic.Bool, step int) bool {
	return step%stopEvery == 0 && stop != nil && stop.Load()
}

// newMatcher compiles a tokenizer.json pattern. A String pattern matches
// literally; a Regex pattern is Oniguruma syntax, which runs on a
// hand-written scanner (scan.go) if it has one, else on regexp2 (a
// .NET-style backtracking engine) as translateRegex rewrites it, or is
// refused (onig.go); tests check all three against tokenizers.
func newMatcher(p patternJSON) (matcher, error) {
	switch {
	case p.String != nil && p.Regex != nil:
		return nil, fmt.Errorf("both String and Regex")
	case p.String != nil:
		if *p.String == "" {
			return nil, errEmptyPattern
		}
		return literalMatcher(*p.String), nil
	case p.Regex != nil:
		if *p.Regex == "" {
			return nil, errEmptyPattern
		}
		if m := scannerFor(*p.Regex); m != nil {
			return m, nil
		}
		return newRegexMatcher(*p.Regex)
	}
	return nil, fmt.Errorf("neither String nor Regex")
}

// literalMatcher matches one string literally.
type literalMatcher string

func (l literalMatcher) find(dst [][2]int, s string, stop *atomic.Bool) [][2]int {
	for off, k := 0, 1; !halted(stop, k); k++ {
		i := strings.Index(s[off:], string(l))
		if i < 0 {
			return dst
		}
		dst = append(dst, [2]int{off + i, off + i + len(l)})
		off += i + len(l)
	}
	return dst
}

// regexMatcher runs a regexp2 pattern. regexp2 works on runes, so offsets are
// converted back to bytes.
type regexMatcher struct {
	re *regexp2.Regexp
}

// newRegexMatcher compiles a tokenizer.json (Oniguruma) pattern, as
// translateRegex rewrites it for regexp2.
func newRegexMatcher(pattern string) (*regexMatcher, error) {
	translated, err := translateRegex(pattern)
	if err != nil {
		return nil, err
	}
	re, err := regexp2.Compile(translated, regexp2.None)
	if err != nil {
		return nil, fmt.Errorf("regex %q: %w", pattern, err)
	}
	re.MatchTimeout = matchTimeout
	return &regexMatcher{re: re}, nil
}

// matchTimeout bounds one match of a regexp2 pattern. Oniguruma gives up
// on a match that backtracks past its retry limit (tokenizers' encode then
// fails); regexp2 has no such limit, and a pattern such as (a+)+$ in a
// hostile tokenizer.json held a tokenizer worker for as long as the text
// made it backtrack.
const matchTimeout = time.Second

type runeScratch struct {
	runes []rune
	offs  []int // byte offset of each rune, and of the end
}

var runeScratchPool = sync.Pool{New: func() any { return new(runeScratch) }}

func (m *regexMatcher) find(dst [][2]int, s string, stop *atomic.Bool) [][2]int {
	if s == "" {
		return dst
	}
	sc := runeScratchPool.Get().(*runeScratch)
	defer runeScratchPool.Put(sc)
	runes, offs := sc.runes[:0], sc.offs[:0]
	for i, r := range s {
		runes = append(runes, r)
		offs = append(offs, i)
	}
	offs = append(offs, len(s))
	sc.runes, sc.offs = runes, offs
	match, err := m.re.FindRunesMatch(runes)
	lastEnd := -1
	for k := 1; err == nil && match != nil && !halted(stop, k); k++ {
		start := match.Index
		end := start + match.Length
		// Like the onig crate's find_iter, an empty match right where the
		// previous match ended is skipped.
		if end > start || start != lastEnd {
			dst = append(dst, [2]int{offs[start], offs[end]})
			lastEnd = end
		}
		match, err = m.re.FindNextMatch(match)
	}
	if err != nil {
		// regexp2 fails only on a match past matchTimeout: the text is not
		// followed, as tokenizers would not encode it. A caller that can
		// be told to stop is; one that cannot recovers the panic
		// (tokenize.Run) and routes without a prediction.
		if stop != nil {
			stop.Store(true)
			return dst
		}
		panic(fmt.Sprintf("tokenize: regexp2 %q: %v", m.re.String(), err))
	}
	return dst
}
