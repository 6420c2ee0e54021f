package sim

import (
	"fmt"
	"math"

	"github.com/inferrail/inferrail/internal/openai"
)

// samplingFields are the sampling parameters vLLM range-checks when it
// builds a request's SamplingParams. The stand-in model does not sample,
// but a request vLLM refuses must be refused here too.
type samplingFields struct {
	temperature, topP, minP, presence, frequency, repetition float64
	hasTemperature, hasTopP, hasMinP                         bool
	hasPresence, hasFrequency, hasRepetition                 bool
	topK                                                     int
	hasTopK                                                  bool
}

func readSampling(v *validator, o *object) samplingFields {
	var f samplingFields
	f.temperature, f.hasTemperature = v.number(o, "temperature")
	f.topP, f.hasTopP = v.number(o, "top_p")
	f.minP, f.hasMinP = v.number(o, "min_p")
	f.presence, f.hasPresence = v.number(o, "presence_penalty")
	f.frequency, f.hasFrequency = v.number(o, "frequency_penalty")
	f.repetition, f.hasRepetition = v.number(o, "repetition_penalty")
	f.topK, f.hasTopK = v.integer(o, "top_k", true)
	return f
}

// check makes vLLM's SamplingParams checks, in their order, with their
// messages; the ones vLLM raises as VLLMValidationError name the parameter.
func (f *samplingFields) check() *openai.Error {
	switch {
	case f.hasPresence && !(f.presence >= -2 && f.presence <= 2):
		return openai.BadRequest(fmt.Sprintf("presence_penalty must be in [-2, 2], got %s.", pyFloat(f.presence)), "")
	case f.hasFrequency && !(f.frequency >= -2 && f.frequency <= 2):
		return openai.BadRequest(fmt.Sprintf("frequency_penalty must be in [-2, 2], got %s.", pyFloat(f.frequency)), "")
	case f.hasRepetition && !finite(f.repetition):
		return openai.BadRequest(fmt.Sprintf("repetition_penalty must be a finite number, got %s.", pyFloat(f.repetition)), "")
	case f.hasRepetition && !(f.repetition > 0):
		return openai.BadRequest(fmt.Sprintf("repetition_penalty must be greater than zero, got %s.", pyFloat(f.repetition)), "")
	case f.hasTemperature && !finite(f.temperature):
		return openai.BadRequest(fmt.Sprintf("temperature must be a finite number, got %s.", pyFloat(f.temperature)), "temperature")
	case f.hasTemperature && f.temperature < 0:
		return openai.BadRequest(fmt.Sprintf("temperature must be non-negative, got %s.", pyFloat(f.temperature)), "temperature")
	case f.hasTemperature && f.temperature > 2:
		return openai.BadRequest(fmt.Sprintf("temperature must be in [0, 2], got %s.", pyFloat(f.temperature)), "temperature")
	case f.hasTopP && !(f.topP > 0 && f.topP <= 1):
		return openai.BadRequest(fmt.Sprintf("top_p must be in (0, 1], got %s.", pyFloat(f.topP)), "top_p")
	case f.hasTopK && f.topK < -1:
		return openai.BadRequest(fmt.Sprintf("top_k must be 0 (disable), or at least 1, got %d.", f.topK), "")
	case f.hasMinP && !(f.minP >= 0 && f.minP <= 1):
		return openai.BadRequest(fmt.Sprintf("min_p must be in [0, 1], got %s.", pyFloat(f.minP)), "")
	}
	return nil
}

func finite(f float64) bool { return !math.IsInf(f, 0) && !math.IsNaN(f) }

// unionTag is a step of an error's location that names the member of a
// union the value failed, as pydantic reports it ('str', 'list[str]').
// vLLM's param leaves it out.
type unionTag string

// validateStop checks stop, a string or a list of strings.
func validateStop(v *validator, o *object) {
	raw, ok := o.get("stop")
	if !ok || raw == nil {
		return
	}
	switch t := raw.(type) {
	case string:
	case []any:
		var bad []int
		for i, e := range t {
			if _, isStr := e.(string); !isStr {
				bad = append(bad, i)
			}
		}
		if len(bad) == 0 {
			return
		}
		v.add("string_type", []any{"stop", unionTag("str")}, "Input should be a valid string", raw)
		for _, i := range bad {
			v.add("string_type", []any{"stop", unionTag("list[str]"), i}, "Input should be a valid string", t[i])
		}
	default:
		v.add("string_type", []any{"stop", unionTag("str")}, "Input should be a valid string", raw)
		v.add("list_type", []any{"stop", unionTag("list[str]")}, "Input should be a valid list", raw)
	}
}

// stopStrings is the request's stop as SamplingParams holds it: a string
// becomes a list of one, null or absent an empty list. The body's stop is
// validated first.
func stopStrings(o *object) []string {
	raw, _ := o.get("stop")
	switch t := raw.(type) {
	case string:
		return []string{t}
	case []any:
		out := make([]string, 0, len(t))
		for _, e := range t {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}
