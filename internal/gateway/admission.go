package gateway

// Admission: what a request asks of flow control, and whether it is let
// through now. A request's priority class is its key's, or a less
// important one it asks for with x-inferrail-priority; its TTFT target is
// x-inferrail-ttft-target-ms, else its key's ttft_target, else its
// model's. A request with a target is admitted only while some replica's
// estimated TTFT (the cost model's, as every decision carries it) meets
// what is left of the target; while it does not, the request waits in
// the queue (flow.go) as long as waiting can still meet it, and is shed
// with 429 once it cannot.

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/inferrail/inferrail/internal/auth"
	"github.com/inferrail/inferrail/internal/openai"
	"github.com/inferrail/inferrail/internal/policy"
)

// admission is what flow control knows of a request.
type admission struct {
	class  auth.Priority
	key    string        // who it shares its class with: its key's name, "" without keys
	target time.Duration // its TTFT target; 0 for none
	// Set by judge when the target is priced: the best replica's estimate
	// and the floor, the estimate on an idle replica, in seconds.
	best, floor float64
	priced      bool
	// denied is set by /admin/explain?key= for a key that may not use the
	// model: the client port would refuse the request before admission.
	denied bool
}

// maxTargetMs is the largest x-inferrail-ttft-target-ms: one hour.
const maxTargetMs = int64(auth.MaxTTFTTarget / time.Millisecond)

// admissionFor reads the request's class and target. key is its key, nil
// without keys; maxClass is the most important class it may ask for.
func admissionFor(r *http.Request, key *auth.Key, maxClass auth.Priority, modelTarget time.Duration) (*admission, error) {
	a := &admission{class: maxClass, target: modelTarget}
	if key != nil {
		a.key = key.Name
		if key.TTFTTarget > 0 {
			a.target = key.TTFTTarget
		}
	}
	if vs := r.Header.Values(openai.HeaderPriority); len(vs) > 0 {
		p, ok := auth.ParsePriority(vs[0])
		if len(vs) > 1 || !ok || vs[0] == "" {
			return nil, newRefusal(openai.BadRequest("The x-inferrail-priority header must be one of critical, standard or sheddable.", ""), reasonBadRequest)
		}
		a.class = max(p, maxClass) // never more important than allowed
	}
	if vs := r.Header.Values(openai.HeaderTTFTTarget); len(vs) > 0 {
		ms, err := strconv.ParseInt(vs[0], 10, 64)
		if len(vs) > 1 || err != nil || ms <= 0 || ms > maxTargetMs {
			return nil, newRefusal(openai.BadRequest(fmt.Sprintf("The x-inferrail-ttft-target-ms header must be a whole number of milliseconds from 1 to %d.", maxTargetMs), ""), reasonBadRequest)
		}
		a.target = time.Duration(ms) * time.Millisecond
	}
	return a, nil
}

// classify sets the request's admission from its key and headers. It runs
// before the body is read, so a bad header is answered at once to a client
// waiting on Expect: 100-continue; the model's target, the last default,
// is filled in once the body names the model.
func classify(ex *exchange) error {
	key := auth.FromContext(ex.r.Context())
	maxClass := auth.Standard
	if key != nil {
		maxClass = key.Priority
	}
	a, err := admissionFor(ex.r, key, maxClass, 0)
	if err != nil {
		return err
	}
	ex.adm = a
	return nil
}

// modelTarget is the TTFT target of the request's model in its
// generation; 0 for none.
func (g *Gateway) modelTarget(ex *exchange) time.Duration {
	for i := range ex.gen.cfg.Models {
		if m := &ex.gen.cfg.Models[i]; m.Name == ex.model {
			return time.Duration(m.TTFTTarget)
		}
	}
	return 0
}

// Errors of SLO admission.
var (
	// errSLOWait: no replica's estimate meets the target now, but one
	// freed could: the request may wait.
	errSLOWait = errors.New("no replica's estimated TTFT meets the target now")
	// errSLOUnreachable: even an idle replica would not meet what is left
	// of the target.
	errSLOUnreachable = errors.New("no replica can meet the TTFT target")
)

// judge prices the request on the offered candidates against what is left
// of its target at now: nil when some candidate's estimate meets it,
// errSLOWait when none does but an idle replica would, errSLOUnreachable
// when not even that. The floor is the prompt's prefill with the most
// cache any candidate is predicted to hold (none when nothing was
// offered).
func (a *admission) judge(cost policy.CostParams, req *policy.Request, cands []policy.Candidate, arrived, now time.Time) error {
	a.best, a.priced = math.Inf(1), true
	cached := 0
	for i := range cands {
		a.best = min(a.best, cost.Estimate(req, &cands[i]).TTFTSecs)
		cached = max(cached, min(cands[i].Cached, req.PromptTokens))
	}
	a.floor = cost.Prefill(req.PromptTokens-cached, cached)
	left := (a.target - now.Sub(arrived)).Seconds()
	switch {
	case a.best <= left:
		return nil
	case a.floor > left:
		return errSLOUnreachable
	}
	return errSLOWait
}

// latestStart is the last instant at which the request, started on an
// idle replica, would still meet its target; the zero time without a
// target.
func (a *admission) latestStart(arrived time.Time) time.Time {
	if a.target <= 0 || !a.priced {
		return time.Time{}
	}
	return arrived.Add(a.target - time.Duration(a.floor*float64(time.Second)))
}

// Reasons a request is shed, as inferrail_flow_shed_total and
// inferrail_request_errors_total label them.
const (
	shedQueueFull      = "queue_full"
	shedClassFull      = "class_full"
	shedKeyFull        = "key_full"
	shedQueueTimeout   = "queue_timeout"
	shedSLOUnreachable = "slo_unreachable"
	shedSLOUnmet       = "slo_unmet"
)

// shed is the 429 of a request flow control turned away for reason after
// it waited so long. It tells the client when to retry, as a rate limit
// does, so the SDKs back off on their own.
func shed(reason string, a *admission, waited time.Duration) *refusal {
	var msg string
	switch {
	case reason == shedQueueFull:
		msg = "Every replica serving the model is at capacity and the queue is full. Please retry shortly."
	case reason == shedClassFull:
		msg = fmt.Sprintf("Every replica serving the model is at capacity and the queue of the %s class is full. Please retry shortly.", a.class)
	case reason == shedKeyFull:
		msg = fmt.Sprintf("Every replica serving the model is at capacity and the key `%s` has as many requests waiting as it may. Please retry shortly.", a.key)
	case reason == shedQueueTimeout:
		msg = "Every replica serving the model stayed at capacity for as long as the request could wait. Please retry shortly."
	case reason == shedSLOUnreachable && a.floor < a.target.Seconds():
		// An idle replica would have made it: the wait is what ran out.
		msg = fmt.Sprintf("The request waited %s for a replica with room, too long for a first token within the TTFT target of %s (an idle replica needs about %s). Raise the target or retry later.",
			roundSecs(waited.Seconds()), a.target, roundSecs(a.floor))
	case reason == shedSLOUnreachable:
		msg = fmt.Sprintf("No replica can give a first token within the TTFT target of %s: even an idle one needs about %s. Raise the target.",
			a.target, roundSecs(a.floor))
		// The same request asked again meets the same idle estimate: the
		// SDKs are told not to retry it, as for a prompt past a rate limit.
		rf := newRefusal(openai.OpenAIError(http.StatusTooManyRequests, "requests", "overloaded", msg, ""), reason)
		rf.header = http.Header{"X-Should-Retry": {"false"}}
		return rf
	default: // shedSLOUnmet
		msg = fmt.Sprintf("No replica's estimated time to first token (best %s) meets the TTFT target of %s now. Please retry shortly.",
			roundSecs(a.best), a.target)
	}
	rf := newRefusal(openai.OpenAIError(http.StatusTooManyRequests, "requests", "overloaded", msg, ""), reason)
	rf.header = http.Header{"Retry-After": {"1"}, "Retry-After-Ms": {"1000"}}
	return rf
}

// roundSecs writes seconds as a duration to the millisecond.
func roundSecs(s float64) string {
	if math.IsInf(s, 1) {
		return "unknown"
	}
	return time.Duration(s * float64(time.Second)).Round(time.Millisecond).String()
}

// admissionVerdict is what /admin/explain says flow control would do with
// the request now: admit it, queue it, shed it (429) or refuse it (503,
// as without flow control), and why.
type admissionVerdict struct {
	Verdict string `json:"verdict"`
	// Reason is why it would not be admitted at once: at_capacity (no
	// replica has room), slo_estimate (no replica's estimate meets the
	// target), others_waiting (the queue holds requests ahead),
	// over_fair_share (its key holds its fair share of the slots), a shed
	// reason, or no_replica.
	Reason string `json:"reason,omitempty"`
	Class  string `json:"class"`
	// TTFTTargetMs is the target it would carry; 0 for none.
	TTFTTargetMs int64 `json:"ttft_target_ms"`
	// BestEstimateSecs and FloorSecs are, with a target, the best offered
	// replica's estimated TTFT (null when none was offered) and an idle
	// replica's.
	BestEstimateSecs *float64 `json:"best_estimate_secs,omitempty"`
	FloorSecs        *float64 `json:"floor_secs,omitempty"`
	// Waiting is how many requests wait for the model now; QueueLimit is
	// flow.max_queued, 0 without a queue.
	Waiting    int `json:"waiting"`
	QueueLimit int `json:"queue_limit"`
	// With fair sharing of slots (flow.fair_share_window): the model's
	// slots, the keys counted against the request's (its own included),
	// its key's share and what its key holds in flight. Absent without.
	FairShare *fairShareVerdict `json:"fair_share,omitempty"`
}

// fairShareVerdict is where the request's key stands in the fair sharing
// of the model's slots; Slots 0 means they have no bound (no share).
type fairShareVerdict struct {
	Slots      int `json:"slots"`
	ActiveKeys int `json:"active_keys"`
	Share      int `json:"share"`
	InFlight   int `json:"in_flight"`
	// OverShare: a slot is free and the key may not have it
	// (fairshare.Table.Held). notAllowed: the key may not take a slot now,
	// free or not, which is what holds it back as routing does.
	OverShare  bool `json:"over_share"`
	notAllowed bool
	// Usage is the key's in-flight count averaged over the window, Credit
	// the whole slots of its share that leaves unused, and Owed whether
	// that puts its next request ahead of keys merely under their share.
	Usage  float64 `json:"usage"`
	Credit int     `json:"credit"`
	Owed   bool    `json:"owed"`
	// OthersBurstRoom is the room other keys keep for their bursts past
	// their shares, which the key's share counts less by.
	OthersBurstRoom int `json:"others_burst_room"`
	// Paced is whether the key's prefills are paced (flow.pace_prefills):
	// replicas where it has a prompt awaiting its first token are not
	// offered (not_offered "prefill_paced").
	Paced bool `json:"paced"`
}

// fairVerdict is where ex's key stands in fair sharing at now; nil
// without fair sharing.
func (g *Gateway) fairVerdict(ex *exchange, a *admission, now time.Time) *fairShareVerdict {
	if !ex.gen.cfg.Flow.FairShare() {
		return nil
	}
	mq := g.flow.queues[ex.model]
	f := flowOf(a)
	v := &fairShareVerdict{Slots: g.slots(ex.gen, ex.model, now)}
	mq.mu.Lock()
	defer mq.mu.Unlock()
	v.InFlight = mq.fair.InFlight(f)
	v.ActiveKeys = mq.fair.Counted(f, now)
	if v.Slots > 0 {
		v.Share = mq.fair.Share(f, v.Slots, now)
		v.OverShare = mq.fair.Held(f, v.Slots, now)
		v.notAllowed = !mq.fair.Allowed(f, v.Slots, now)
		v.Credit = mq.fair.Credit(f, v.Slots, now)
		v.Owed = mq.fair.Owed(f, v.Slots, now)
		v.OthersBurstRoom = mq.fair.Extra(f, v.Slots, now)
		v.Paced = mq.pacedLocked(ex.gen, f, v.Slots, 0, now)
	}
	v.Usage = mq.fair.Usage(f, now)
	return v
}

// Verdicts of admissionVerdict.
const (
	verdictAdmit  = "admit"
	verdictQueue  = "queue"
	verdictShed   = "shed"
	verdictRefuse = "refuse"
)

// verdict says what flow control would do with ex now, offered cands
// (usable: some replica serving the model is usable at all). It changes
// nothing: the queue is only looked at.
func (g *Gateway) verdict(ex *exchange, cands []policy.Candidate, usable bool, now time.Time) *admissionVerdict {
	a := ex.adm
	if a == nil {
		a = &admission{}
	}
	fl := &ex.gen.cfg.Flow
	mq := g.flow.queues[ex.model]
	v := &admissionVerdict{Class: a.class.String(), TTFTTargetMs: a.target.Milliseconds(), QueueLimit: fl.MaxQueued, Waiting: int(mq.waiting.Load())}
	if a.denied {
		v.Verdict, v.Reason = verdictRefuse, string(auth.ModelDenied)
		return v
	}
	v.FairShare = g.fairVerdict(ex, a, now)
	over := v.FairShare != nil && v.FairShare.OverShare
	held := v.FairShare != nil && v.FairShare.notAllowed
	// While others wait, a key fair sharing serves first starts at once,
	// full queue or not (startNow): it is admitted where it has a replica.
	ahead := v.Waiting > 0 && fl.Enabled() && g.startsAhead(ex.gen, ex.model, a)
	var slo error
	if a.target > 0 {
		slo = a.judge(ex.gen.cost[ex.model], &ex.route, cands, ex.arrived, now)
		floor := a.floor
		v.FloorSecs = &floor
		if len(cands) > 0 {
			best := a.best
			v.BestEstimateSecs = &best
		}
	}
	switch {
	case !usable:
		v.Verdict, v.Reason = verdictRefuse, reasonNoReplica
		return v
	case errors.Is(slo, errSLOUnreachable) && len(cands) > 0:
		v.Verdict, v.Reason = verdictShed, shedSLOUnreachable
		return v
	case len(cands) > 0 && slo == nil && (v.Waiting == 0 && !held || ahead || !fl.Enabled()):
		v.Verdict = verdictAdmit
		return v
	}
	switch {
	case over && slo == nil:
		v.Reason = "over_fair_share"
	case held && slo == nil:
		v.Reason = notOfferedFull // fair sharing counts every slot taken
	case v.Waiting > 0 && len(cands) > 0 && slo == nil:
		v.Reason = "others_waiting"
	case len(cands) > 0:
		v.Reason = "slo_estimate"
	default:
		v.Reason = notOfferedFull
	}
	if !fl.Enabled() {
		v.Verdict = verdictRefuse
		if v.Reason == "slo_estimate" {
			v.Verdict, v.Reason = verdictShed, shedSLOUnmet
		}
		return v
	}
	mq.mu.Lock()
	err := mq.q.Check(a.class.Index(), a.key)
	mq.mu.Unlock()
	v.Verdict = verdictQueue
	if err != nil {
		v.Verdict, v.Reason = verdictShed, shedReason(err)
	}
	return v
}
