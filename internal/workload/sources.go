package workload

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"
)

// span is an inclusive range of token counts or seconds, drawn uniformly.
type span struct{ lo, hi int }

func (s span) draw(r *rand.Rand) int { return s.lo + r.IntN(s.hi-s.lo+1) }
func (s span) mean() float64         { return float64(s.lo+s.hi) / 2 }

// drawSeconds draws a time uniformly from s, read as seconds.
func (s span) drawSeconds(r *rand.Rand) time.Duration {
	return seconds(float64(s.lo) + r.Float64()*float64(s.hi-s.lo))
}

// sessionLead is the longest a session of at most turns requests, gap
// apart, runs past its start.
func sessionLead(turns int, gap span) time.Duration {
	return time.Duration(turns-1) * time.Duration(gap.hi) * time.Second
}

// Lengths of the workloads, in tokens unless said otherwise.
var (
	sharedSystemLen = span{2000, 8000}
	questionLen     = span{50, 500}
	w1Output        = span{100, 300}

	chatTurns     = span{3, 8}
	chatQuestion  = span{50, 300}
	chatReply     = span{100, 400}
	chatThinkSecs = span{10, 20}

	agentSteps    = span{3, 10}
	agentTask     = span{100, 300}
	agentResult   = span{200, 800}
	agentOutput   = span{30, 100}
	agentGapSecs  = span{2, 6}
	agentArgWords = span{8, 30}

	docCorpus   = 2000
	docLen      = span{300, 1200}
	docsPerReq  = span{1, 4}
	ragQuestion = span{20, 100}
	ragOutput   = span{100, 300}

	fewShotExamples = 8
	fewShotQ        = span{60, 150}
	fewShotA        = span{30, 100}
	fewShotQuestion = span{20, 80}
	fewShotOutput   = span{10, 50}

	w6Prompt = span{500, 2500}
	w6Output = span{100, 300}
)

// Purposes of seeded texts.
const (
	textSystem = iota + 1
	textDoc
	textFewShot
	textTraceBlock
	textTraceTail
	textAgentSystem
	textToolDoc
)

// gen holds what every source shares: the spec, the request generator and
// the cached shared texts.
type gen struct {
	spec Spec
	r    *rand.Rand

	systems []text // shared system prompts, made on first use
}

func newGen(spec Spec) *gen {
	return &gen{spec: spec, r: newRand(spec.Seed, streamRequests)}
}

// unique draws a text of n tokens no other request shares.
func (g *gen) unique(n int) text { return wordsText(g.r.Uint64(), n) }

// output draws max_tokens, or returns the fixed OutputTokens.
func (g *gen) output(s span) int {
	if g.spec.OutputTokens > 0 {
		return g.spec.OutputTokens
	}
	return s.draw(g.r)
}

// system returns shared system prompt i, 2,000–8,000 tokens.
func (g *gen) system(i int) text {
	if g.systems == nil {
		g.systems = make([]text, g.spec.SystemPrompts)
	}
	if g.systems[i].s == "" {
		seed := textSeed(g.spec.Seed, textSystem, uint64(i))
		r := rand.New(rand.NewPCG(seed, 0))
		g.systems[i] = wordsText(seed, sharedSystemLen.draw(r))
	}
	return g.systems[i]
}

func (g *gen) request(at time.Duration, kind string, c *chat, maxTokens int) Request {
	return Request{
		At:           at,
		Path:         ChatPath,
		Body:         c.body(maxTokens),
		Kind:         kind,
		MaxTokens:    maxTokens,
		PromptTokens: c.promptTokens(),
	}
}

func newSource(ctx context.Context, spec Spec) (source, error) {
	g := newGen(spec)
	switch spec.Workload {
	case W1, W8:
		return &sharedSource{gen: g, kind: spec.Workload}, nil
	case Hot:
		return &sharedSource{gen: g, kind: Hot, zipf: newZipf(spec.SystemPrompts, spec.Zipf)}, nil
	case Mix:
		return &mixSource{shared: sharedSource{gen: g, kind: W1}, control: controlSource{gen: g}}, nil
	case W2:
		if spec.ShareGPTPath != "" {
			return readShareGPTSource(ctx, g)
		}
		return &chatSource{gen: g}, nil
	case W3:
		return newAgentSource(g), nil
	case W4:
		return newRAGSource(g), nil
	case W5:
		return &fewShotSource{gen: g}, nil
	case W6:
		return controlSource{gen: g}, nil
	}
	return nil, fmt.Errorf("workload %q: no source", spec.Workload)
}

// sharedSource makes w1, w8 and hot requests: a shared system prompt and a
// question.
type sharedSource struct {
	*gen
	single
	kind string
	zipf *zipf // nil for a uniform choice
}

func (s *sharedSource) start(at time.Duration, dst []Request) []Request {
	var i int
	if s.zipf != nil {
		i = s.zipf.draw(s.r)
	} else {
		i = s.r.IntN(s.spec.SystemPrompts)
	}
	c := &chat{model: s.spec.Model, messages: []message{
		newMessage("system", s.system(i)),
		newMessage("user", s.unique(questionLen.draw(s.r))),
	}}
	return append(dst, s.request(at, s.kind, c, s.output(w1Output)))
}

// controlSource makes w6 requests, which share nothing.
type controlSource struct {
	*gen
	single
}

func (s controlSource) start(at time.Duration, dst []Request) []Request {
	c := &chat{model: s.spec.Model, messages: []message{
		newMessage("user", s.unique(w6Prompt.draw(s.r))),
	}}
	return append(dst, s.request(at, W6, c, s.output(w6Output)))
}

// mixSource makes w1 and w6 requests, half each.
type mixSource struct {
	single
	shared  sharedSource
	control controlSource
}

func (s *mixSource) start(at time.Duration, dst []Request) []Request {
	if s.shared.r.IntN(2) == 0 {
		return s.shared.start(at, dst)
	}
	return s.control.start(at, dst)
}

// chatSource makes generated w2 conversations.
type chatSource struct {
	*gen
	n int // conversations started
}

var chatSystem = literal("You are a helpful assistant. Answer clearly and keep the conversation going.")

func (s *chatSource) perStart() float64 { return chatTurns.mean() }

func (s *chatSource) lead() time.Duration {
	return sessionLead(chatTurns.hi, chatThinkSecs)
}

func (s *chatSource) start(at time.Duration, dst []Request) []Request {
	session := sessionName(W2, s.spec.Seed, s.n)
	s.n++
	c := &chat{model: s.spec.Model, messages: []message{newMessage("system", chatSystem)}}
	turns := chatTurns.draw(s.r)
	for turn := range turns {
		c.messages = append(c.messages, newMessage("user", s.unique(chatQuestion.draw(s.r))))
		out := s.output(chatReply)
		if turn > 0 && c.promptTokens()+out > s.spec.MaxPromptTokens {
			break
		}
		req := s.request(at, W2, c, out)
		req.Session = session
		dst = append(dst, req)
		// The history resent next turn holds a reply of the length asked for.
		c.messages = append(c.messages, newMessage("assistant", s.unique(out)))
		at += chatThinkSecs.drawSeconds(s.r)
	}
	return dst
}

func sessionName(kind string, seed uint64, n int) string {
	return kind + "-" + strconv.FormatUint(mix64(seed)&0xffffffff, 16) + "-" + strconv.Itoa(n)
}

// agentSource makes w3 agent loops.
type agentSource struct {
	*gen
	tools      []string
	names      []string
	toolTokens int
	system     text
	n          int
}

// agentTools are the shared tools: name, what it does, and its one
// argument. Their descriptions are lengthened with seeded text.
var agentTools = [...]struct{ name, what, arg string }{
	{"search_code", "Search the repository for code matching a query.", "query"},
	{"read_file", "Read a file of the repository and return its text.", "path"},
	{"edit_file", "Replace a span of a file with new text.", "patch"},
	{"run_tests", "Run the test suite, or the tests matching a pattern, and report failures.", "pattern"},
	{"list_directory", "List the entries of a directory of the repository.", "path"},
	{"web_search", "Search the web and return the best results with short extracts.", "query"},
}

func newAgentSource(g *gen) *agentSource {
	s := &agentSource{gen: g}
	for i, t := range agentTools {
		seed := textSeed(g.spec.Seed, textToolDoc, uint64(i))
		desc := t.what + " " + string(appendWords(nil, seed, 60+int(seed%60)))
		tool := `{"type":"function","function":{"name":` + quote(t.name) + `,"description":` + quote(desc) +
			`,"parameters":{"type":"object","properties":{` + quote(t.arg) + `:{"type":"string","description":` +
			quote("The "+t.arg+".") + `}},"required":[` + quote(t.arg) + `]}}}`
		s.tools = append(s.tools, tool)
		s.names = append(s.names, t.name)
	}
	s.toolTokens = toolsTokens(s.tools)
	s.system = wordsText(textSeed(g.spec.Seed, textAgentSystem, 0), 400)
	return s
}

func (s *agentSource) perStart() float64 { return agentSteps.mean() }

func (s *agentSource) lead() time.Duration {
	return sessionLead(agentSteps.hi, agentGapSecs)
}

func (s *agentSource) start(at time.Duration, dst []Request) []Request {
	session := sessionName(W3, s.spec.Seed, s.n)
	s.n++
	c := &chat{model: s.spec.Model, tools: s.tools, toolTokens: s.toolTokens, messages: []message{
		newMessage("system", s.system),
		newMessage("user", s.unique(agentTask.draw(s.r))),
	}}
	steps := agentSteps.draw(s.r)
	for step := range steps {
		out := s.output(agentOutput)
		if step > 0 && c.promptTokens()+out > s.spec.MaxPromptTokens {
			break
		}
		req := s.request(at, W3, c, out)
		req.Session = session
		dst = append(dst, req)
		// The step's reply calls a tool; the next step resends the call
		// and the tool's result.
		tool := s.r.IntN(len(agentTools))
		arg := string(appendWords(nil, s.r.Uint64(), agentArgWords.draw(s.r)))
		args := "{" + quote(agentTools[tool].arg) + ":" + quote(arg[:len(arg)-1]) + "}"
		id := "call_" + strconv.Itoa(step)
		call := newToolCall(id, s.names[tool], args)
		c.messages = append(c.messages, newMessage("assistant").withCalls(call))
		result := newMessage("tool", s.unique(agentResult.draw(s.r)))
		result.callID = id
		c.messages = append(c.messages, result)
		at += agentGapSecs.drawSeconds(s.r)
	}
	return dst
}

// ragSource makes w4 requests: a shared instruction, documents by Zipf
// weight, a question.
type ragSource struct {
	*gen
	single
	zipf *zipf
	docs map[int]text
}

var (
	ragInstruction = literal("Answer the question using only the documents below. Cite the documents you use by their number, and say so when the documents do not hold the answer.")
	ragHeader      = literal("Documents:\n\n")
	ragQuestionTag = literal("Question: ")
)

func newRAGSource(g *gen) *ragSource {
	return &ragSource{gen: g, zipf: newZipf(docCorpus, g.spec.Zipf), docs: make(map[int]text)}
}

func (s *ragSource) doc(i int) text {
	d, ok := s.docs[i]
	if !ok {
		seed := textSeed(s.spec.Seed, textDoc, uint64(i))
		d = wordsText(seed, docLen.lo+int(seed%uint64(docLen.hi-docLen.lo+1)))
		s.docs[i] = d
	}
	return d
}

func (s *ragSource) start(at time.Duration, dst []Request) []Request {
	n := docsPerReq.draw(s.r)
	picked := make([]int, 0, n)
	for len(picked) < n {
		if d := s.zipf.draw(s.r); !slices.Contains(picked, d) {
			picked = append(picked, d)
		}
	}
	parts := []text{ragHeader}
	for k, d := range picked {
		parts = append(parts, literal("["+strconv.Itoa(k+1)+"] "), s.doc(d), literal("\n\n"))
	}
	parts = append(parts, ragQuestionTag, s.unique(ragQuestion.draw(s.r)))
	c := &chat{model: s.spec.Model, messages: []message{
		newMessage("system", ragInstruction),
		newMessage("user", parts...),
	}}
	return append(dst, s.request(at, W4, c, s.output(ragOutput)))
}

// fewShotSource makes w5 requests: a shared block of worked examples and a
// short question.
type fewShotSource struct {
	*gen
	single
	blocks []text
}

func (s *fewShotSource) block(i int) text {
	if s.blocks == nil {
		s.blocks = make([]text, s.spec.SystemPrompts)
	}
	if s.blocks[i].s == "" {
		seed := textSeed(s.spec.Seed, textFewShot, uint64(i))
		r := rand.New(rand.NewPCG(seed, 0))
		b := []byte("Answer each question in the same way as the worked examples.\n\n")
		for range fewShotExamples {
			b = append(b, "Q: "...)
			b = appendWords(b, r.Uint64(), fewShotQ.draw(r))
			b = append(b, "\nA: "...)
			b = appendWords(b, r.Uint64(), fewShotA.draw(r))
			b = append(b, "\n\n"...)
		}
		s.blocks[i] = literal(string(b))
	}
	return s.blocks[i]
}

func (s *fewShotSource) start(at time.Duration, dst []Request) []Request {
	i := s.r.IntN(s.spec.SystemPrompts)
	c := &chat{model: s.spec.Model, messages: []message{
		newMessage("system", s.block(i)),
		newMessage("user", literal("Q: "), s.unique(fewShotQuestion.draw(s.r))),
	}}
	return append(dst, s.request(at, W5, c, s.output(fewShotOutput)))
}

// zipf draws 0 … n-1 with weight 1/(k+1)^s.
type zipf struct{ cdf []float64 }

func newZipf(n int, s float64) *zipf {
	z := &zipf{cdf: make([]float64, n)}
	sum := 0.0
	for k := range n {
		sum += math.Pow(float64(k+1), -s)
		z.cdf[k] = sum
	}
	for k := range z.cdf {
		z.cdf[k] /= sum
	}
	return z
}

func (z *zipf) draw(r *rand.Rand) int {
	i, _ := slices.BinarySearch(z.cdf, r.Float64())
	return min(i, len(z.cdf)-1)
}
