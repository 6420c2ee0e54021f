package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inferrail/inferrail/internal/config"
)

// maxPatchBytes bounds a PATCH /admin/config body: a whole config is far
// smaller.
const maxPatchBytes = 4 << 20

// maxProblems is how many of a refused change's problems an answer lists.
const maxProblems = 100

// configAnswer is the body of GET /admin/config and of a successful PATCH
// or reload.
type configAnswer struct {
	Generation uint64 `json:"generation"`
	Result     string `json:"result,omitempty"` // applied or unchanged, after a change
	// ApplySecs is how long applying the change took, after an applied one.
	ApplySecs float64         `json:"apply_secs,omitempty"`
	Config    json.RawMessage `json:"config"`
}

// problemAnswer is the body of a refused change: every problem at once.
type problemAnswer struct {
	Error    string          `json:"error"`
	Result   string          `json:"result"`
	Problems []problemDetail `json:"problems"`
}

type problemDetail struct {
	Path    string `json:"path,omitempty"`
	Line    int    `json:"line,omitempty"`
	Message string `json:"message"`
}

// serveConfig answers GET /admin/config: the config in effect and its
// generation.
func (g *Gateway) serveConfig(w http.ResponseWriter, r *http.Request) {
	g.writeGeneration(w, g.current(), "")
}

func (g *Gateway) writeGeneration(w http.ResponseWriter, gen *generation, result string) {
	cfg, err := gen.document()
	if err != nil {
		writeAdminJSON(w, http.StatusInternalServerError, problemAnswer{Error: err.Error(), Problems: []problemDetail{}})
		return
	}
	w.Header().Set("X-Inferrail-Config-Generation", strconv.FormatUint(gen.n, 10))
	ans := configAnswer{Generation: gen.n, Result: result, Config: cfg}
	if result == reloadApplied {
		ans.ApplySecs = gen.applied.Seconds()
	}
	writeAdminJSON(w, http.StatusOK, ans)
}

// servePatchConfig answers PATCH /admin/config: a JSON merge patch (RFC
// 7396) applied to the config in effect, validated as the file is. The
// file is left alone: its next edit replaces the patch.
func (g *Gateway) servePatchConfig(w http.ResponseWriter, r *http.Request) {
	var body []byte
	err := error(&http.MaxBytesError{Limit: maxPatchBytes})
	if r.ContentLength > maxPatchBytes {
		skipBody(w, r) // refused unread, as other refusals before the body
	} else {
		body, err = io.ReadAll(http.MaxBytesReader(w, r.Body, maxPatchBytes))
	}
	if err != nil {
		status, msg := http.StatusRequestEntityTooLarge, "the patch is larger than 4 MiB"
		_, tooLarge := errors.AsType[*http.MaxBytesError](err)
		switch {
		case tooLarge:
		case errors.Is(err, os.ErrDeadlineExceeded):
			// As a client-port body that stalls: a 408, without the
			// socket's addresses.
			status, msg = http.StatusRequestTimeout, "the patch did not arrive whole within server.request_timeout"
		default:
			status, msg = http.StatusBadRequest, "the patch's body could not be read: "+err.Error()
		}
		writeProblems(w, status, reloadRejected, &ReloadError{Problems: []config.Error{{Msg: msg}}})
		if tooLarge {
			// A body that never came whole (its client left) is no
			// attempt at a reload.
			g.reloaded(reloadRejected)
		}
		return
	}
	// Patches are applied one at a time onto the config in effect, so that
	// two at once cannot undo each other; a reload of the file that lands
	// between reading the config and applying the patch makes it start
	// over on the new config, so that neither undoes the other either.
	g.patchMu.Lock()
	defer g.patchMu.Unlock()
	for range patchTries {
		base := g.current()
		doc, err := base.document()
		if err != nil {
			g.reloaded(reloadRejected)
			writeProblems(w, http.StatusInternalServerError, reloadRejected, &ReloadError{Problems: []config.Error{{Msg: err.Error()}}})
			return
		}
		next, err := config.PatchDocument(doc, body)
		if err != nil {
			status := http.StatusUnprocessableEntity
			if errors.Is(err, config.ErrPatch) {
				status = http.StatusBadRequest
			}
			re := refusedFrom(base.cfg, err)
			for i := range re.Problems {
				re.Problems[i].Line = 0 // lines of the merged JSON, which nobody wrote
			}
			g.rejected(re, "patch")
			writeProblems(w, status, reloadRejected, re)
			return
		}
		result, gen, err := g.applyOnto(base, next, "patch")
		if errors.Is(err, errStale) {
			continue
		}
		var re *ReloadError
		if errors.As(err, &re) {
			writeProblems(w, http.StatusUnprocessableEntity, result, re)
			return
		}
		g.writeGeneration(w, gen, result)
		return
	}
	g.reloaded(reloadRejected)
	writeProblems(w, http.StatusConflict, reloadRejected, &ReloadError{Problems: []config.Error{{Msg: "the config kept changing while the patch was applied; send it again"}}})
}

// patchTries is how many times a patch starts over when the config in
// effect changed under it.
const patchTries = 3

// serveReload answers POST /admin/reload: the config file reread now.
func (g *Gateway) serveReload(w http.ResponseWriter, r *http.Request) {
	result, gen, err := g.reloadFile(r.Context(), "admin", true)
	var re *ReloadError
	switch {
	case errors.As(err, &re):
		writeProblems(w, http.StatusUnprocessableEntity, reloadRejected, re)
	case err != nil:
		writeProblems(w, http.StatusConflict, reloadRejected, &ReloadError{Problems: []config.Error{{Msg: err.Error()}}})
	default:
		g.writeGeneration(w, gen, result)
	}
}

func writeProblems(w http.ResponseWriter, status int, result string, re *ReloadError) {
	out := problemAnswer{Error: "the config was refused; the config in effect stays", Result: result, Problems: []problemDetail{}}
	for i, p := range re.Problems {
		if i == maxProblems {
			// A change with thousands of bad entries would answer megabytes.
			out.Problems = append(out.Problems, problemDetail{Message: fmt.Sprintf("and %d more problems", len(re.Problems)-i)})
			break
		}
		out.Problems = append(out.Problems, problemDetail{Path: p.Path, Line: p.Line, Message: p.Msg})
	}
	writeAdminJSON(w, status, out)
}

// controlCollector reports the config in effect: its generation and each
// model's split.
type controlCollector struct{ g *Gateway }

var (
	descGeneration = prometheus.NewDesc("inferrail_config_generation", "The generation of the config in effect: 1 at start, one more at every applied change.", nil, nil)
	descPolicy     = prometheus.NewDesc("inferrail_model_policy", "The policies routing each model: 1 for each.", []string{"model", "policy"}, nil)
	descPercent    = prometheus.NewDesc("inferrail_model_policy_percent", "The percent of a model's requests each policy routes.", []string{"model", "policy"}, nil)
)

func (c *controlCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descGeneration
	ch <- descPolicy
	ch <- descPercent
}

func (c *controlCollector) Collect(ch chan<- prometheus.Metric) {
	gen := c.g.current()
	ch <- prometheus.MustNewConstMetric(descGeneration, prometheus.GaugeValue, float64(gen.n))
	for model, mp := range gen.routing {
		for _, a := range mp.arms {
			ch <- prometheus.MustNewConstMetric(descPolicy, prometheus.GaugeValue, 1, model, a.policy.Name())
			ch <- prometheus.MustNewConstMetric(descPercent, prometheus.GaugeValue, float64(a.percent), model, a.policy.Name())
		}
	}
}
