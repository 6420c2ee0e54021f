package engine

import (
	"fmt"
	"strings"

	"github.com/inferrail/inferrail/internal/stress"
)

// kvSummary is a summary line of one kv-mirror variant.
func kvSummary(variant string, f *KVMirrorFigures) string {
	verdict := fmt.Sprintf("the mirror equals the engine's cache (%d blocks) and the last %d batches replay byte for byte", f.EngineCopies, f.ReplayChecked)
	if f.ReplayUnseen > 0 {
		verdict += fmt.Sprintf(" (%d more replayed that the live tap missed while reconnecting)", f.ReplayUnseen)
	}
	if len(f.Problems) > 0 {
		verdict = fmt.Sprintf("**%d failed checks**: %s", len(f.Problems), strings.Join(f.Problems, "; "))
	}
	return fmt.Sprintf("KV mirror, %s: %d requests, %d batches applied, %d gaps, %d replays, %d purges; %s.",
		variant, f.Requests, f.Feed.Applied, f.Feed.Gaps, f.Feed.Replays, f.Feed.Purges, verdict)
}

func renderKVMirror(w *strings.Builder, r *Result) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("| Variant | Requests | Completed | Errors | Load time | Batches applied | Gaps | Replays | Duplicates | Purges | Skipped as seen | Blocks stored | Blocks removed | Engine blocks | Mirror blocks | Mismatched keys | Missing hashes | Replayed equal to live |\n")
	p("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, run := range r.Runs {
		f := run.KVMirror
		if f == nil {
			continue
		}
		unseen := ""
		if f.ReplayUnseen > 0 {
			unseen = fmt.Sprintf(" (+%d not seen live)", f.ReplayUnseen)
		}
		p("| %s | %d | %d | %d | %s | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d of %d%s |\n", run.Variant,
			f.Requests, f.Completed, f.Errors, stress.Secs(f.LoadSeconds), f.Feed.Applied, f.Feed.Gaps, f.Feed.Replays, f.Feed.Duplicates,
			f.Feed.Purges, f.SinkSkipped, f.Mirror.Stored, f.Mirror.Removed, f.EngineCopies, f.MirrorDistinct, f.KeyMismatches, f.MissingHashes,
			f.ReplayEqual, f.ReplayChecked, unseen)
	}
	p("\nBatches applied count live and replayed batches (a restarted subscriber's replay included); blocks stored and removed " +
		"are the mirror's totals over the run; engine blocks are the copies the engine's pool holds at the end, mirror blocks the " +
		"distinct engine hashes the mirror holds. Request errors in engine-restart are the requests the killed simulator dropped " +
		"or refused while it was down.\n\n")
	for _, run := range r.Runs {
		f := run.KVMirror
		if f == nil {
			continue
		}
		if f.DisruptedAt > 0 {
			p("%s: disrupted at request %d.\n", run.Variant, f.DisruptedAt)
		}
		for _, pr := range f.Problems {
			p("- **%s failed:** %s\n", run.Variant, pr)
		}
	}
	p("\n")
	for _, run := range r.Runs {
		if run.KVMirror != nil {
			stress.WriteErrors(w, run.Variant, run.KVMirror.ErrorKinds, run.KVMirror.ErrorSamples)
		}
	}
}
