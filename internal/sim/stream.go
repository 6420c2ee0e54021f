package sim

import "sync"

// Stream carries one request's generated tokens from the engine goroutine to
// the HTTP handler that serves it. The engine never blocks on it: tokens
// queue up until the handler takes them, so a slow client gets several
// tokens in one chunk, as vLLM's output collector merges them. Safe for
// concurrent use by one engine and one reader.
type Stream struct {
	mu     sync.Mutex
	ids    []int  // tokens not taken yet; guarded by mu
	total  int    // tokens generated so far; guarded by mu
	finish string // finish reason once done; guarded by mu
	ready  chan struct{}
}

func newStream() *Stream { return &Stream{ready: make(chan struct{}, 1)} }

// push adds a generated token (or none, when tok < 0) and, when finish is
// not empty, ends the stream.
func (s *Stream) push(tok int, finish string) {
	s.mu.Lock()
	if tok >= 0 {
		s.ids = append(s.ids, tok)
		s.total++
	}
	if finish != "" {
		s.finish = finish
	}
	s.mu.Unlock()
	select {
	case s.ready <- struct{}{}:
	default:
	}
}

// Ready is signalled whenever take has something new.
func (s *Stream) Ready() <-chan struct{} { return s.ready }

// take moves the pending tokens to dst and returns it, the number of tokens
// generated so far and the finish reason ("" while running).
func (s *Stream) take(dst []int) ([]int, int, string) {
	s.mu.Lock()
	dst = append(dst, s.ids...)
	s.ids = s.ids[:0]
	total, finish := s.total, s.finish
	s.mu.Unlock()
	return dst, total, finish
}

// pending is how many tokens wait for take.
func (s *Stream) pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ids)
}
