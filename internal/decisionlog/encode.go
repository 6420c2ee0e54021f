package decisionlog

import (
	"math"
	"strconv"
	"time"

	"github.com/inferrail/inferrail/internal/openai"
)

// AppendJSON appends r as one line of JSON, newline included: its fields
// in the order Record declares them, named by their json tags, as
// encoding/json writes them (a NaN or infinite number as null). The
// writer encodes every record, so this is written out rather than left to
// reflection, which took ten times as long.
func (r *Record) AppendJSON(b []byte) []byte {
	b = append(b, `{"time":"`...)
	b = r.Time.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","request_id":`...)
	b = openai.AppendString(b, r.RequestID)
	b = append(b, `,"model":`...)
	b = openai.AppendString(b, r.Model)
	b = append(b, `,"policy":`...)
	b = openai.AppendString(b, r.Policy)
	b = append(b, `,"arm":`...)
	b = openai.AppendString(b, r.Arm)
	b = append(b, `,"attempt":`...)
	b = strconv.AppendInt(b, int64(r.Attempt), 10)
	b = append(b, `,"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(r.PromptTokens), 10)
	b = append(b, `,"blocks":`...)
	b = strconv.AppendInt(b, int64(r.Blocks), 10)
	b = append(b, `,"tokenized":`...)
	b = openai.AppendString(b, r.Tokenized)
	b = append(b, `,"winner":`...)
	b = openai.AppendString(b, r.Winner)
	b = append(b, `,"estimated_ttft_secs":`...)
	b = appendFloat(b, r.EstimatedTTFTSecs)
	b = append(b, `,"prefill_secs":`...)
	b = appendFloat(b, r.PrefillSecs)
	b = append(b, `,"steered":`...)
	b = openai.AppendString(b, r.Steered)
	b = append(b, `,"decided_by":`...)
	b = openai.AppendString(b, r.DecidedBy)
	b = append(b, `,"guards":`...)
	if r.Guards == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, g := range r.Guards {
			if i > 0 {
				b = append(b, ',')
			}
			b = openai.AppendString(b, g)
		}
		b = append(b, ']')
	}
	b = append(b, `,"hot_owners":`...)
	b = strconv.AppendInt(b, int64(r.HotOwners), 10)
	b = append(b, `,"decision_secs":`...)
	b = appendFloat(b, r.DecisionSecs)
	b = append(b, `,"candidates":`...)
	if r.Candidates == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i := range r.Candidates {
			if i > 0 {
				b = append(b, ',')
			}
			b = r.Candidates[i].appendJSON(b)
		}
		b = append(b, ']')
	}
	return append(b, "}\n"...)
}

func (c *Candidate) appendJSON(b []byte) []byte {
	b = append(b, `{"replica":`...)
	b = openai.AppendString(b, c.Replica)
	b = append(b, `,"state":`...)
	b = openai.AppendString(b, c.State)
	b = append(b, `,"set_aside":`...)
	b = openai.AppendString(b, c.SetAside)
	b = append(b, `,"in_flight":`...)
	b = strconv.AppendInt(b, c.InFlight, 10)
	b = append(b, `,"running":`...)
	if c.Running == nil {
		b = append(b, "null"...)
	} else {
		b = strconv.AppendInt(b, *c.Running, 10)
	}
	b = append(b, `,"kv_usage":`...)
	b = appendFloatPtr(b, c.KVUsage)
	b = append(b, `,"waiting":`...)
	b = appendFloatPtr(b, c.Waiting)
	b = append(b, `,"queued_prefill_secs":`...)
	b = appendFloat(b, c.QueuedPrefillSecs)
	b = append(b, `,"cached_tokens":`...)
	b = appendIntPtr(b, c.CachedTokens)
	b = append(b, `,"priced_cached_tokens":`...)
	b = appendIntPtr(b, c.PricedCachedTokens)
	b = append(b, `,"estimated_ttft_secs":`...)
	b = appendFloatPtr(b, c.EstimatedTTFTSecs)
	b = append(b, `,"score":`...)
	b = appendFloat(b, c.Score)
	return append(b, '}')
}

func appendIntPtr(b []byte, v *int) []byte {
	if v == nil {
		return append(b, "null"...)
	}
	return strconv.AppendInt(b, int64(*v), 10)
}

func appendFloatPtr(b []byte, v *float64) []byte {
	if v == nil {
		return append(b, "null"...)
	}
	return appendFloat(b, *v)
}

// appendFloat writes f as encoding/json does: plain decimals from 1e-6 up
// to 1e21, exponents (e-7, not e-07) outside; null for what JSON has no
// number for.
func appendFloat(b []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(b, "null"...)
	}
	format := byte('f')
	if a := math.Abs(f); a != 0 && (a < 1e-6 || a >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if n := len(b); format == 'e' && n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
		b[n-2] = b[n-1]
		b = b[:n-1]
	}
	return b
}
