// Package measure holds what the benchmark harness (internal/bench) and the
// stress scenarios (internal/stress) measure with alike: nearest-rank
// Percentiles of durations, the Environment a result records, the kinds a
// failed request is counted under (RequestError, Classify), and SleepUntil,
// the precise sleep that sends open-loop requests at their scheduled times.
package measure
