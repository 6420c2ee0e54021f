package bench

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/inferrail/inferrail/internal/linelog"
)

// OutcomeLine is one request of a run as WriteOutcomes writes it: what a
// result file only summarizes, for joining with the gateway's decision log
// (by request_id) to see what a slow request met where it went. Times are
// in the model's milliseconds, like the result's figures.
type OutcomeLine struct {
	Index     int     `json:"index"`
	Warmup    bool    `json:"warmup"`
	SchedMS   float64 `json:"sched_ms"`
	RequestID string  `json:"request_id,omitempty"`
	Replica   string  `json:"replica,omitempty"`
	Session   string  `json:"session,omitempty"`
	Kind      string  `json:"kind,omitempty"`
	Status    int     `json:"status"`
	ErrKind   string  `json:"error,omitempty"`
	// TTFTMS and E2EMS are 0 when not reached; EstimatedMS when the
	// gateway gave no estimate.
	TTFTMS           float64 `json:"ttft_ms"`
	E2EMS            float64 `json:"e2e_ms"`
	EstimatedMS      float64 `json:"estimated_ms,omitempty"`
	SendLagMS        float64 `json:"send_lag_ms"`
	PromptTokens     int     `json:"prompt_tokens"`
	CachedTokens     int     `json:"cached_tokens"`
	CompletionTokens int     `json:"completion_tokens"`
	// PredictedCached is the gateway's prediction of CachedTokens, -1
	// when it made none.
	PredictedCached int `json:"predicted_cached_tokens"`
}

// OpenOutput opens path, with flag (os.O_WRONLY and more), as a regular
// file, refusing anything else with an error naming it. It opens without
// blocking: a FIFO with no reader made the open wait forever, deaf to
// Ctrl-C.
func OpenOutput(path string, flag int) (*os.File, error) {
	f, err := os.OpenFile(path, flag|syscall.O_NONBLOCK, 0o644)
	if errors.Is(err, syscall.ENXIO) {
		// What opening a FIFO without a reader for writing says.
		return nil, fmt.Errorf("%s: not a regular file (a named pipe)", path)
	}
	if err != nil {
		return nil, err
	}
	// O_NONBLOCK does nothing to a regular file's reads and writes.
	st, err := f.Stat()
	if err == nil && !st.Mode().IsRegular() {
		err = fmt.Errorf("%s: not a regular file (a %s)", path, linelog.KindOf(st.Mode()))
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// WriteOutcomes writes every request of a run, one JSON line each in the
// order they were scheduled, to path (replaced if it exists); the first
// warm were the warmup. Failed requests are written too. path must be a
// regular file if it exists (see OpenOutput).
func WriteOutcomes(path string, outs []Outcome, warm int) (err error) {
	f, err := OpenOutput(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for i := range outs {
		o := &outs[i]
		l := OutcomeLine{
			Index: o.Index, Warmup: o.Index < warm, SchedMS: ms(o.Sched), RequestID: o.RequestID,
			Replica: o.Replica, Session: o.Session, Kind: o.Kind, Status: o.Status, ErrKind: o.ErrKind,
			TTFTMS: ms(o.TTFT), E2EMS: ms(o.E2E), EstimatedMS: ms(o.Estimated),
			PromptTokens: o.PromptTokens, CachedTokens: o.CachedTokens, CompletionTokens: o.CompletionTokens,
			PredictedCached: -1,
		}
		if o.Sent > 0 {
			l.SendLagMS = ms(o.Sent - o.Sched)
		}
		if o.Predicted {
			l.PredictedCached = o.PredCachedToks
		}
		if err := enc.Encode(&l); err != nil {
			return fmt.Errorf("outcomes: %w", err)
		}
	}
	return w.Flush()
}
