// Package calibrate measures an idle engine's prefill and fits the router's
// cost model to it: P(u, c) = a·u + b·u·(c + u/2) + d seconds to compute u
// prompt tokens after c cached ones.
//
// Run sends an OpenAI-compatible engine (vLLM, SGLang or inferrail-sim)
// completions of one token, one at a time. Each probe's cached part goes
// alone first, so the probe finds it cached. The prompts are random words
// from a seed the result records, fresh each run, so nothing is cached from
// a run before. Around every request Run reads the engine's metrics page:
//
//   - the TTFT is the change of the engine's own time to first token
//     histogram sum, whose count must move by exactly one, so network and
//     HTTP time stay out of the fit (they are reported apart);
//   - the cached tokens are the change of the engine's prefix cache hit
//     counter, so an engine that cached less than planned (or nothing, with
//     prefix caching off) is fitted on what it computed.
//
// Each shape is probed several times (Design.Reps) and only the fastest
// repetition is fitted (FitFastest): a busy host, a pause or a late wakeup
// only ever adds to a TTFT. For the same reason a shape measured fewer times
// than that (the first send of a cached part, which computes all of it) is
// reported but not fitted. Fit then finds the non-negative a, b and d of
// least squared error with its own Lawson–Hanson NNLS (see nnls for why not
// a library), and Params.Fragment renders them as a routing.cost_model
// config section.
package calibrate
