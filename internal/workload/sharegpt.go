package workload

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"time"
)

// Conversation is one conversation of a ShareGPT file, reduced to what a
// replay sends: an optional system prompt, then turns of a user's message
// and the reply recorded for it.
type Conversation struct {
	ID     string
	System string
	Turns  []Turn
}

// Turn is a user's message and the recorded reply; Reply is empty when the
// conversation ends on the user's message.
type Turn struct {
	User, Reply string
}

// ParseShareGPT reads a ShareGPT-format JSON file: an array of objects with
// "id" and "conversations", a list of {"from", "value"} messages where from
// is human (or user), gpt (or assistant, chatgpt, bard, bing, model) or
// system, in any letter case. Each conversation is kept up to the first
// message that breaks the alternation of user and non-empty reply, which a
// system message may only lead; conversations without a user message are
// dropped. Invalid UTF-8 becomes U+FFFD. Only white space may follow the
// array. A file of more than MaxRequests
// conversations kept is refused: all are kept before the replay, so an
// endless pipe must not take every byte of memory.
func ParseShareGPT(r io.Reader) ([]Conversation, error) {
	return parseShareGPT(r, MaxRequests)
}

// parseShareGPT is ParseShareGPT, refusing a file of more than most
// conversations kept.
func parseShareGPT(r io.Reader, most int) ([]Conversation, error) {
	dec := json.NewDecoder(r)
	if tok, err := dec.Token(); err != nil {
		return nil, err
	} else if tok != json.Delim('[') {
		return nil, errors.New("want a JSON array of conversations")
	}
	var convs []Conversation
	for i := 0; dec.More(); i++ {
		var raw struct {
			ID            json.RawMessage `json:"id"`
			Conversations []struct {
				From  string `json:"from"`
				Value string `json:"value"`
			} `json:"conversations"`
		}
		if err := dec.Decode(&raw); err != nil {
			return nil, fmt.Errorf("conversation %d: %w", i, shareGPTTypeError(err))
		}
		c := Conversation{ID: strings.Trim(string(raw.ID), `"`)}
		for j, m := range raw.Conversations {
			v := strings.ToValidUTF8(m.Value, "\uFFFD")
			role, ok := shareGPTRoles[strings.ToLower(m.From)]
			if !ok {
				break
			}
			last := len(c.Turns) - 1
			switch {
			case role == "system" && j == 0:
				c.System = v
				continue
			case role == "user" && (last < 0 || c.Turns[last].Reply != ""):
				c.Turns = append(c.Turns, Turn{User: v})
				continue
			case role == "assistant" && last >= 0 && c.Turns[last].Reply == "" && v != "":
				c.Turns[last].Reply = v
				continue
			}
			break
		}
		if len(c.Turns) == 0 {
			continue
		}
		if len(convs) == most {
			return nil, fmt.Errorf("conversation %d: more than the %d conversations a replay keeps (a file is read whole before its run)", i, most)
		}
		convs = append(convs, c)
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	// Another array after the first, as cat of two files makes, was
	// ignored: the replay had half the conversations given.
	if tok, err := dec.Token(); err != io.EOF {
		what := "more JSON"
		if err != nil {
			what = "bytes that are not JSON"
		} else if tok == json.Delim('[') {
			what = "another array (one array per file: join them into one)"
		}
		return nil, fmt.Errorf("after the array of conversations: %s", what)
	}
	return convs, nil
}

// shareGPTTypeError says which field of a conversation has the wrong
// JSON type and what it wants, rather than the Go type it was decoded
// into; other errors are returned as they are.
func shareGPTTypeError(err error) error {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) || te.Type == nil {
		return err
	}
	want := "a string"
	if te.Type.Kind() == reflect.Slice {
		want = "an array of {\"from\", \"value\"} messages"
	}
	return fmt.Errorf("%s: want %s, not %s", te.Field, want, te.Value)
}

var shareGPTRoles = map[string]string{
	"human": "user", "user": "user",
	"gpt": "assistant", "assistant": "assistant", "chatgpt": "assistant", "bard": "assistant", "bing": "assistant", "model": "assistant",
	"system": "system",
}

// Longest reply a replayed turn asks for when the recorded reply is longer.
const maxReplayOutput = 4096

// shareGPTSource replays w2 conversations from a ShareGPT file, in an order
// drawn from the seed, starting over when every one was used.
type shareGPTSource struct {
	*gen
	convs []replayConv
	order []int
	mean  float64 // requests start makes per conversation (sent)
	most  int     // turns of the longest conversation
	n     int
}

type replayConv struct {
	system *message
	turns  []replayTurn
}

type replayTurn struct {
	user, reply message
	out         int // the recorded reply's tokens, bounded
}

// ReadShareGPT reads the ShareGPT file at path once (see ParseShareGPT),
// so that a pipe or a FIFO replays as well as a file, and returns the
// SHA-256 of the bytes read, in hex (Spec.ShareGPTDigest): what tells two
// files at one path apart. ctx done before the reading ends is an error.
func ReadShareGPT(ctx context.Context, path string) (convs []Conversation, digest string, err error) {
	return readDigested(ctx, path, "sharegpt", ParseShareGPT)
}

// GenerateShareGPT is GenerateRequests for a w2 spec replaying a ShareGPT
// file whose conversations are already read (ReadShareGPT):
// spec.ShareGPTPath is not opened again.
func GenerateShareGPT(ctx context.Context, spec Spec, convs []Conversation) (*Requests, error) {
	if err := spec.Validate(); err != nil {
		return nil, fmt.Errorf("workload spec: %w", err)
	}
	if spec.Workload != W2 || spec.ShareGPTPath == "" {
		return nil, errors.New("workload spec: not a w2 replay of a ShareGPT file")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	spec = spec.WithDefaults()
	src, err := newShareGPTSource(newGen(spec), convs)
	if err != nil {
		return nil, err
	}
	return NewRequests(schedule(spec, src)), nil
}

// readShareGPTSource reads g's ShareGPT file for a replay, refusing one
// whose bytes are not those the spec records.
func readShareGPTSource(ctx context.Context, g *gen) (*shareGPTSource, error) {
	convs, digest, err := ReadShareGPT(ctx, g.spec.ShareGPTPath)
	if err != nil {
		return nil, err
	}
	if want := g.spec.ShareGPTDigest; want != "" && digest != want {
		return nil, fmt.Errorf("sharegpt %s: its contents are not those planned (sha256 %s, not %s): it changed since", g.spec.ShareGPTPath, digest, want)
	}
	return newShareGPTSource(g, convs)
}

func newShareGPTSource(g *gen, convs []Conversation) (*shareGPTSource, error) {
	s := &shareGPTSource{gen: g}
	sent := 0.0
	for _, c := range convs {
		var rc replayConv
		if c.System != "" {
			m := newMessage("system", literal(c.System))
			rc.system = &m
		}
		for _, t := range c.Turns {
			rt := replayTurn{user: newMessage("user", literal(t.User))}
			if t.Reply != "" {
				reply := literal(t.Reply)
				rt.reply = newMessage("assistant", reply)
				rt.out = min(max(reply.tokens, 1), maxReplayOutput)
			}
			rc.turns = append(rc.turns, rt)
		}
		// A conversation whose first turn is already too long is left out.
		first := chat{messages: []message{rc.turns[0].user}}
		if rc.system != nil {
			first.messages = append(first.messages, *rc.system)
		}
		if first.promptTokens() > g.spec.MaxPromptTokens {
			continue
		}
		s.convs = append(s.convs, rc)
		sent += s.sent(rc)
		s.most = max(s.most, len(rc.turns))
	}
	switch {
	case len(convs) == 0:
		return nil, fmt.Errorf(`sharegpt %s: no usable conversation: none starts with a user's message ({"from": "human" or "user", "value": text}, a system message before it; "role" and "content" are not read)`, g.spec.ShareGPTPath)
	case len(s.convs) == 0:
		return nil, fmt.Errorf("sharegpt %s: no usable conversation: the first turn of each of its %d is past max_prompt_tokens (%d)", g.spec.ShareGPTPath, len(convs), g.spec.MaxPromptTokens)
	}
	// The start rate divides Rate by the requests a start makes, which
	// are fewer than the file's turns where start cuts a conversation:
	// the file's mean turns left a replay of long conversations at a third
	// of its rate.
	s.mean = sent / float64(len(s.convs))
	s.order = newRand(g.spec.Seed, streamShareGPT).Perm(len(s.convs))
	return s, nil
}

func (s *shareGPTSource) perStart() float64 { return s.mean }

func (s *shareGPTSource) lead() time.Duration {
	return sessionLead(s.most, chatThinkSecs)
}

func (s *shareGPTSource) start(at time.Duration, dst []Request) []Request {
	session := sessionName(W2, s.spec.Seed, s.n)
	rc := s.convs[s.order[s.n%len(s.order)]]
	s.n++
	c := &chat{model: s.spec.Model}
	if rc.system != nil {
		c.messages = append(c.messages, *rc.system)
	}
	for i, t := range rc.turns {
		c.messages = append(c.messages, t.user)
		out := s.replayOut(t)
		if out == 0 {
			out = chatReply.draw(s.r)
		}
		if s.cut(c, i, out) {
			break
		}
		req := s.request(at, W2, c, out)
		req.Session = session
		dst = append(dst, req)
		if t.out == 0 {
			break
		}
		c.messages = append(c.messages, t.reply)
		at += chatThinkSecs.drawSeconds(s.r)
	}
	return dst
}

// replayOut is the max_tokens of a replayed turn: the spec's fixed output,
// else the recorded reply's tokens; 0 when the turn has no recorded reply
// and start draws its length from chatReply.
func (s *shareGPTSource) replayOut(t replayTurn) int {
	if s.spec.OutputTokens > 0 {
		return s.spec.OutputTokens
	}
	return t.out
}

// cut reports whether start ends a conversation before its turn i, whose
// prompt is c and which asks for out tokens: a later turn past
// MaxPromptTokens is not sent.
func (s *shareGPTSource) cut(c *chat, i, out int) bool {
	return i > 0 && c.promptTokens()+out > s.spec.MaxPromptTokens
}

// sent is how many requests start makes of rc: its turns up to the first
// that cut stops, or up to one without a recorded reply. Such a turn's
// length is drawn, so it counts as the share of chatReply's lengths that
// cut lets through.
func (s *shareGPTSource) sent(rc replayConv) float64 {
	c := &chat{model: s.spec.Model}
	if rc.system != nil {
		c.messages = append(c.messages, *rc.system)
	}
	n := 0.0
	for i, t := range rc.turns {
		c.messages = append(c.messages, t.user)
		out := s.replayOut(t)
		if out == 0 {
			if i == 0 {
				return n + 1
			}
			room := s.spec.MaxPromptTokens - c.promptTokens() // the longest reply that fits
			lengths := chatReply.hi - chatReply.lo + 1
			return n + float64(min(max(room-chatReply.lo+1, 0), lengths))/float64(lengths)
		}
		if s.cut(c, i, out) {
			return n
		}
		n++
		if t.out == 0 {
			return n // no recorded reply: the conversation ends here
		}
		c.messages = append(c.messages, t.reply)
	}
	return n
}
