// Package workload generates the request streams inferrail-bench replays:
// the named workloads (w1 … w8, mix, hot, trace), each request with the time
// it is scheduled to leave. Generation is pure: the same Spec gives the same
// requests, byte for byte, so every policy of a comparison sees the same
// traffic.
//
// Every body is a streaming chat completion request asking for usage, with
// ignore_eos set so the reply is exactly max_tokens long. Lengths are counted
// in builtin:sim tokens (simtok.Tokenizer), the tokenizer of the benchmark
// fleets, so "a 2,000-token system prompt" is 2,000 tokens as the simulator
// counts them.
//
// The workloads, with their defaults (every length in tokens, inclusive
// ranges drawn uniformly):
//
//   - w1: SystemPrompts (8) shared system prompts of 2,000–8,000 tokens,
//     chosen uniformly, each followed by a 50–500-token question; output
//     100–300.
//   - hot: w1 with the system prompt drawn by Zipf weight (exponent 1.1).
//   - mix: each request is a w1 or a w6 request with equal chance; Kind
//     says which.
//   - w2: conversations of 3–8 turns after a short shared system prompt,
//     each turn resending the whole history with a 50–300-token question;
//     replies (and max_tokens) of 100–400. A user thinks 10–20 s between
//     turns; each conversation has its own Session. With ShareGPTPath the
//     conversations are replayed from a ShareGPT file instead.
//   - w3: agent loops of 3–10 steps over six shared tool definitions (the
//     tools field) and a shared system prompt: a 100–300-token task, then
//     each step resends the context grown by the previous step's tool call
//     and a 200–800-token tool result, 2–6 s after the previous step.
//     Output 30–100; each loop has its own Session.
//   - w4: RAG. A short shared instruction, then one to four distinct
//     documents of 300–1,200 tokens drawn by Zipf weight (exponent 1.0) from
//     a corpus of 2,000, then a 20–100-token question; output 100–300.
//   - w5: few-shot. One of SystemPrompts (4) shared blocks of eight worked
//     examples (about 700–2,000 tokens), then a 20–80-token question;
//     output 10–50.
//   - w6: the control: a 500–2,500-token prompt that shares nothing;
//     output 100–300.
//   - w8: w1's shared prompts, arriving in Gamma bursts (CV 2) over a
//     diurnal ramp.
//   - trace: replay of a Mooncake-format trace (see ParseTrace). The trace's
//     timestamps are the arrivals; each hash id is a 512-token block of
//     text, the same text wherever the id appears. GenerateRequests makes
//     each prompt only when it is asked for (Requests), so a replay need
//     not hold every prompt of a long trace at once.
//
// For w2 and w3 the arrival process gives the conversation (or loop)
// starts, at Rate divided by the mean number of requests per start, so the
// request rate is Rate on average; later turns follow at their think times.
// A ShareGPT replay counts the requests each conversation really sends,
// cut at MaxPromptTokens and at a turn without a recorded reply, not its
// turns in the file.
// Starts begin before the run, as long before as the longest conversation
// lasts, so it opens with conversations under way rather than ramping up.
//
// Arrivals are Poisson unless Arrivals is gamma: Gamma-distributed gaps of
// coefficient of variation CV (shape 1/CV²), sampled with Marsaglia and
// Tsang's method. The diurnal ramp time-warps the arrival process so the
// rate follows rate·(1 − A·cos(2πt/P)) over the run's length P: quiet at the
// start and end, busiest in the middle, the mean rate kept. P is Duration,
// or Requests/Rate when the run is cut by count.
//
// OracleHitRate and Analyze compute the ceiling any router faces: the share
// of prompt tokens an unlimited prefix cache, seeing every earlier request,
// could have served.
package workload
