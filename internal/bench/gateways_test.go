package bench

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/procs"
)

// Two gateways in index mode exact in front of the same two simulators,
// the requests sent to each in turn: each routes half, and at the end both
// mirror the same blocks of every engine.
func TestMeasureTwoExactGateways(t *testing.T) {
	reqs := sharedPromptRequests(30, 20*time.Millisecond, 4, 0)
	spec := smallSpec("cost_model", 50, len(reqs))
	spec.Index, spec.Gateways = IndexExact, 2
	r, err := Measure(t.Context(), spec, fleetEnv(t, reqs))
	if err != nil {
		t.Fatal(err)
	}
	m := r.Measurements
	if m.Succeeded != m.Measured || len(m.Errors) != 0 {
		t.Fatalf("%d of %d succeeded, errors %v %v", m.Succeeded, m.Measured, m.Errors, m.ErrorSamples)
	}
	if len(m.Gateways) != 2 || m.Gateways[0].Measured+m.Gateways[1].Measured != m.Measured ||
		m.Gateways[0].Measured != m.Measured/2 || m.Gateways[0].URL == m.Gateways[1].URL {
		t.Errorf("per gateway %+v of %d measured", m.Gateways, m.Measured)
	}
	if r.Setup.Gateways != 2 || !strings.HasPrefix(r.Setup.Gateway, "2 inferrail-gateway child processes") {
		t.Errorf("setup %+v", r.Setup)
	}
	if len(r.GatewayIndexes) != 2 || r.Index != r.GatewayIndexes[0] || !r.GatewayIndexes[1].Following() {
		t.Fatalf("gateway indexes %+v", r.GatewayIndexes)
	}
	if a := r.Agreement; a == nil || !a.Agree || a.Replicas != 2 {
		t.Errorf("agreement %+v", a)
	}
	if got := spec.FileName(); got != "w1_rate50_rep0_cost_model_exact_gw2.json" {
		t.Errorf("FileName = %q", got)
	}
	var b strings.Builder
	WriteSummary(&b, r)
	for _, want := range []string{"via cost_model (index exact) through 2 gateways", "gateway 2: ", "index agreement: the 2 gateways' mirrors of 2 engines agree"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, b.String())
		}
	}
}

// compareIndexes names every engine whose stream differs from the first
// gateway's, and a gateway that follows other engines.
func TestCompareIndexes(t *testing.T) {
	seq := func(n uint64) *uint64 { return &n }
	st := func(digest string, ids ...string) *procs.IndexStatus {
		s := &procs.IndexStatus{}
		for _, id := range ids {
			s.KVEvents = append(s.KVEvents, procs.KVStream{ID: id, Source: "events", LastSeq: seq(7), Mirrored: 3, Digest: "aa",
				Mirror: procs.MirrorCounters{Stored: 5, Removed: 2}})
		}
		s.KVEvents[len(ids)-1].Digest = digest
		return s
	}
	if n, diffs := compareIndexes([]*procs.IndexStatus{st("bb", "sim-1", "sim-2"), st("bb", "sim-1", "sim-2")}); n != 2 || len(diffs) != 0 {
		t.Errorf("same: %d replicas, %v", n, diffs)
	}
	n, diffs := compareIndexes([]*procs.IndexStatus{st("bb", "sim-1", "sim-2"), st("cc", "sim-1", "sim-2")})
	if n != 2 || len(diffs) != 1 || !strings.Contains(diffs[0], "sim-2: gateway 1 source events, 3 blocks mirrored, last seq 7, 5 stored, 2 removed, digest bb; gateway 2") ||
		!strings.HasSuffix(diffs[0], "digest cc") {
		t.Errorf("digest differs: %d, %q", n, diffs)
	}
	if _, diffs := compareIndexes([]*procs.IndexStatus{st("bb", "sim-1", "sim-2"), st("aa", "sim-1")}); len(diffs) != 1 ||
		diffs[0] != "gateway 2 follows 1 engines, gateway 1 2" {
		t.Errorf("an engine missing: %q", diffs)
	}
	if n, diffs := compareIndexes([]*procs.IndexStatus{{}, {}}); n != 0 || len(diffs) != 0 {
		t.Errorf("approximate: %d, %v", n, diffs)
	}
}

// The report lists the runs of a point through one gateway and through
// several, where their load went and whether the gateways agreed.
func TestReportGatewayRuns(t *testing.T) {
	run := func(gws int, index string, a *IndexAgreement) *RunResult {
		s := smallSpec("cost_model", 6, 100)
		s.Index, s.Gateways = index, gws
		return &RunResult{Spec: s, Agreement: a, Measurements: Measurements{
			Replicas: map[string]int{"sim-1": 60, "sim-2": 40}, ReplicaTTFTP99: map[string]float64{"sim-1": 1.5, "sim-2": 0.25},
			BusiestShare: 0.6, Succeeded: 100, Measured: 100}}
	}
	var w strings.Builder
	writeGatewayRuns(&w, []*RunResult{run(0, "", nil)})
	if w.Len() != 0 {
		t.Errorf("one gateway only: %q", w.String())
	}
	writeGatewayRuns(&w, []*RunResult{run(2, IndexExact, &IndexAgreement{Agree: true, Replicas: 2, Reads: 1}), run(0, IndexExact, nil),
		run(2, IndexExact, &IndexAgreement{Reads: 50, Differences: []string{"sim-1: differs"}})})
	for _, want := range []string{"| w1_rate6_rep0_cost_model_exact | 1 | sim-1 60 (1,500), sim-2 40 (250) | 0.60 | – | – | – |",
		"| w1_rate6_rep0_cost_model_exact_gw2 | 2 | sim-1 60 (1,500), sim-2 40 (250) | 0.60 | – | – | agree on 2 engines (1 reads) |",
		"**differ** after 50 reads: sim-1: differs"} {
		if !strings.Contains(w.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, w.String())
		}
	}
}

// herdingOf counts, at each measured request's send, how many more
// requests were in flight on its replica than on the least busy one.
func TestHerding(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	o := func(rep string, sent, end int) Outcome { return Outcome{Replica: rep, Sent: ms(sent), E2E: ms(end)} }
	outs := []Outcome{
		o("a", 1, 100), o("a", 2, 100), o("a", 3, 100), // warmup: a busy
		o("a", 10, 20), // 3 in flight on a, 0 on b: excess 3, piled
		o("b", 20, 30), // a's 4th ended at 20: 3 on a, 0 on b: excess 0
		o("a", 40, 50), // 3 on a, 0 on b: excess 3
		o("b", 0, 0),   // never sent: not counted
		o("", 5, 50),   // no replica: not counted
	}
	h := herdingOf(outs, 3, nil)
	if h == nil || h.MeanExcess != 2 || h.Piled != 2.0/3 {
		t.Errorf("herding %+v, want mean excess 2, piled 2/3", h)
	}
	// Waiting for the first token: the warmup's first tokens came at 5,
	// 50 and 60; at 10 two wait on a, at 20 and 40 one.
	outs[0].TTFT, outs[1].TTFT, outs[2].TTFT = ms(5), ms(50), ms(60)
	if h := herdingOf(outs, 3, nil); h == nil || h.MeanExcessWaiting != 4.0/3 || h.PiledWaiting != 0 {
		t.Errorf("herding %+v, want mean excess waiting 4/3, none piled", h)
	}
	if herdingOf([]Outcome{{}}, 0, []string{"a"}) != nil {
		t.Error("herding without replicas")
	}
}

// A replica of the fleet that no request went to is the least busy, with
// none in flight: left out (as the outcomes alone have it), the excess of
// requests sent where others were in flight reads lower than it was.
func TestHerdingCountsIdleReplicas(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	o := func(rep string, sent, end int) Outcome { return Outcome{Replica: rep, Sent: ms(sent), E2E: ms(end)} }
	outs := []Outcome{
		o("a", 1, 100), o("a", 2, 100), o("b", 3, 100), // warmup: 2 on a, 1 on b
		o("b", 10, 20), // to b (1 in flight), a at 2: excess 0, or 1 over an idle c
		o("a", 30, 40), // to a (2 in flight), b at 1: excess 1, or 2 over an idle c
	}
	for _, tt := range []struct {
		name     string
		replicas []string
		mean     float64
	}{
		{"outcomes_alone", nil, 0.5},
		{"fleet_with_an_idle_replica", []string{"a", "b", "c"}, 1.5},
		{"fleet_of_the_named", []string{"b", "a"}, 0.5},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if h := herdingOf(outs, 3, tt.replicas); h == nil || h.MeanExcess != tt.mean {
				t.Errorf("herding %+v, want mean excess %v", h, tt.mean)
			}
		})
	}
}

// waitingSources splits the queue at each measured request's send by
// gateway: its own gateway's requests still without a first token, and
// another's sent less than the window before.
func TestWaitingSources(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	o := func(target int, rep string, sent, ttft int) Outcome {
		return Outcome{Target: target, Replica: rep, Sent: ms(sent), TTFT: ms(ttft), E2E: ms(ttft + 10)}
	}
	outs := []Outcome{
		o(0, "a", 1, 1000),  // warmup, gateway 0's
		o(1, "b", 50, 1000), // warmup, gateway 1's
		// Gateway 0 sends to c at 120: its own wait on a, the other's
		// (70 ms old) on b; none on c.
		o(0, "c", 120, 1000),
		// Gateway 1 sends to b at 200: its own waits on b; gateway 0's on
		// c (80 ms old) is recent, its one on a (199 ms old) is not.
		o(1, "b", 200, 1000),
	}
	ws := waitingSources(outs, 2, nil, 100*time.Millisecond)
	want := WaitingSources{Own: 0.5, OwnAverage: 1.0 / 3, OtherRecent: 0, OtherRecentAverage: 1.0 / 3}
	if ws == nil || math.Abs(ws.Own-want.Own) > 1e-12 || math.Abs(ws.OwnAverage-want.OwnAverage) > 1e-12 ||
		ws.OtherRecent != want.OtherRecent || math.Abs(ws.OtherRecentAverage-want.OtherRecentAverage) > 1e-12 {
		t.Errorf("sources %+v, want %+v", ws, want)
	}
	// Through one gateway, every waiting request is its own: 1 on a and
	// 1 on b at 120, 1 on a, 1 on b and 1 on c at 200.
	for i := range outs {
		outs[i].Target = 0
	}
	ws = waitingSources(outs, 2, nil, 100*time.Millisecond)
	if want := (WaitingSources{Own: 0.5, OwnAverage: (2.0/3 + 1) / 2}); ws == nil || ws.Own != want.Own ||
		math.Abs(ws.OwnAverage-want.OwnAverage) > 1e-12 || ws.OtherRecent != 0 || ws.OtherRecentAverage != 0 {
		t.Errorf("one gateway: sources %+v, want %+v", ws, want)
	}
	if waitingSources([]Outcome{{}}, 0, nil, time.Second) != nil {
		t.Error("sources without replicas")
	}
}

// waitingSources against a naive count: every measured request looks at
// every other request sent before it.
func TestWaitingSourcesAgainstNaive(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	reps := []string{"a", "b", "c"}
	for round := range 200 {
		n := 2 + r.IntN(40)
		outs := make([]Outcome, n)
		for i := range outs {
			outs[i] = Outcome{Target: r.IntN(3), Replica: reps[r.IntN(len(reps))], Sent: time.Duration(1 + r.IntN(500)),
				TTFT: time.Duration(r.IntN(300)), E2E: time.Duration(300 + r.IntN(300))}
		}
		warm, window := r.IntN(n), time.Duration(1+r.IntN(200))
		// The average is over the fleet's replicas, d among them every
		// other round though no request went there, and those the
		// outcomes name.
		var fleet []string
		if round%2 == 1 {
			fleet = []string{"a", "d"}
		}
		names := replicasOf(outs)
		for _, f := range fleet {
			names[f] = true
		}
		k := float64(len(names))
		var want WaitingSources
		measured := 0
		for i := warm; i < n; i++ {
			x := &outs[i]
			own, other := map[string]int{}, map[string]int{}
			for j := range outs {
				y := &outs[j]
				// Sent before x (ties by the order sending sorts them in)
				// and still without a first token then.
				before := y.Sent < x.Sent || (y.Sent == x.Sent && j < i)
				if j == i || !before || waitingEnd(y) <= x.Sent {
					continue
				}
				if y.Target == x.Target {
					own[y.Replica]++
				} else if x.Sent-y.Sent < window {
					other[y.Replica]++
				}
			}
			var ownAll, otherAll int
			for _, rep := range reps {
				ownAll += own[rep]
				otherAll += other[rep]
			}
			want.Own += float64(own[x.Replica])
			want.OtherRecent += float64(other[x.Replica])
			want.OwnAverage += float64(ownAll) / k
			want.OtherRecentAverage += float64(otherAll) / k
			measured++
		}
		got := waitingSources(outs, warm, fleet, window)
		if measured == 0 {
			if got != nil {
				t.Fatalf("round %d: sources %+v without measured requests", round, got)
			}
			continue
		}
		m := float64(measured)
		want.Own, want.OwnAverage, want.OtherRecent, want.OtherRecentAverage = want.Own/m, want.OwnAverage/m, want.OtherRecent/m, want.OtherRecentAverage/m
		if got == nil || math.Abs(got.Own-want.Own) > 1e-9 || math.Abs(got.OwnAverage-want.OwnAverage) > 1e-9 ||
			math.Abs(got.OtherRecent-want.OtherRecent) > 1e-9 || math.Abs(got.OtherRecentAverage-want.OtherRecentAverage) > 1e-9 {
			t.Fatalf("round %d: sources %+v, naive %+v", round, got, want)
		}
	}
}

func replicasOf(outs []Outcome) map[string]bool {
	m := map[string]bool{}
	for i := range outs {
		m[outs[i].Replica] = true
	}
	return m
}
