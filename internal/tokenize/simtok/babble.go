package simtok

// words are the words the simulator's stand-in model says. Every word is
// followed by a space when spoken, so each ends a piece and the spoken text
// encodes back to exactly the ids that were spoken.
var words = [...]string{
	"the", "a", "model", "token", "cache", "prefix", "router", "request", "reply", "engine",
	"block", "prompt", "fast", "slow", "queue", "batch", "decode", "prefill", "is", "of",
	"and", "to", "in", "that", "it", "for", "on", "with", "as", "at",
	"this", "by", "from", "we", "you", "they", "was", "are", "be", "can",
	"will", "one", "all", "would", "there", "their", "what", "so", "up", "out",
	"if", "about", "who", "get", "which", "go", "me", "when", "make", "like",
	"time", "no", "just", "him",
}

// Babbler yields the tokens of generated text: words of a fixed list chosen
// by a seeded generator, each followed by a space. The same seed yields the
// same tokens. The zero value is a valid babbler with seed 0.
type Babbler struct {
	state   uint64
	pending [4]int // ids of the word being spoken
	next, n int    // pending[next:n] are still to come
}

// NewBabbler returns a babbler seeded with seed.
func NewBabbler(seed uint64) Babbler { return Babbler{state: seed} }

// Next returns the next generated token id, never a special one.
func (b *Babbler) Next() int {
	if b.next == b.n {
		w := words[b.rand()%uint64(len(words))]
		b.n = len(encodePieces(b.pending[:0], w+" "))
		b.next = 0
	}
	id := b.pending[b.next]
	b.next++
	return id
}

// rand is splitmix64.
func (b *Babbler) rand() uint64 {
	b.state += 0x9e3779b97f4a7c15
	z := b.state
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}
