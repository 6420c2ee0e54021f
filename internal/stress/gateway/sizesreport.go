package gateway

import (
	"fmt"
	"slices"
	"strings"

	"github.com/inferrail/inferrail/internal/stress"
)

func (w *mdWriter) sizes(legs []SizesLeg) {
	w.p("| Tokenizer | Body | Size | Status | Gateway's tokenizer | Prompt tokens | Wait for tokens (max) | Answer (max) | Straight to the engine (max) | Gateway adds (medians) | Whole tokenization in the harness |\n")
	w.p("|---|---|--:|---|---|--:|--:|--:|--:|--:|---|\n")
	for _, leg := range legs {
		for _, f := range leg.Bodies {
			tokens := "–"
			if f.PromptTokens > 0 {
				tokens = fmt.Sprint(f.PromptTokens)
			}
			direct := "–"
			if len(f.DirectSeconds) > 0 {
				direct = stress.Secs(slices.Max(f.DirectSeconds))
			}
			w.p("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s: %s |\n", leg.Tokenizer, f.Body, stress.MiB(int64(f.Bytes)), joinInts(f.Statuses),
				strings.Join(f.Outcomes, ", "), tokens, stress.Secs(slices.Max(f.TokenizeSeconds)), stress.Secs(slices.Max(f.AnswerSeconds)),
				direct, signedSecs(f.AddedSeconds), stress.Secs(f.HarnessSeconds), cell(f.HarnessResult))
		}
	}
	w.p("\n")
	for _, leg := range legs {
		for _, f := range leg.Bodies {
			for _, m := range uniq(f.ErrorMessages) {
				w.p("- %s %s: `%s`\n", leg.Tokenizer, f.Body, strings.ReplaceAll(cell(m), "`", "'"))
			}
			if f.Bad != "" {
				w.p("- %s %s, bad answer: `%s`\n", leg.Tokenizer, f.Body, strings.ReplaceAll(cell(f.Bad), "`", "'"))
			}
		}
	}
	w.p("\n")
}

func (w *mdWriter) tokenFlood(f *TokenFloodFigures) {
	w.kv(
		row("prompts at once × words (body)", fmt.Sprintf("%d × %d (%s, %d tokens as the engine counts)", f.Prompts, f.Words, stress.MiB(int64(f.BodyBytes)), f.EngineTokens)),
		row("tokenizer workers", fmt.Sprint(f.Workers)),
		row("served / errors", fmt.Sprintf("%d / %d", f.Served, f.Errors)),
		row("gateway's tokenizer results", formatCounts(f.Outcomes)),
		row("answers with a prediction / exact", fmt.Sprintf("%d / %d", f.Predicted, f.Exact)),
		row("mean wait for tokens", stress.Secs(f.TokenizeWaitMean)),
		row("latency / wall time", fmt.Sprintf("%s / %s", pct(f.Latency), stress.Secs(f.WallSeconds))),
	)
	stress.WriteErrors(w, "Flood", f.ErrorKinds, f.ErrorSamples)
}

// signedSecs is stress.Secs with a sign for a negative difference.
func signedSecs(s float64) string {
	if s < 0 {
		return "−" + stress.Secs(-s)
	}
	return stress.Secs(s)
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = fmt.Sprint(n)
	}
	return strings.Join(uniq(s), ", ")
}

// uniq is s without repeats, in first-seen order.
func uniq(s []string) []string {
	var out []string
	for _, x := range s {
		if !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	return out
}
