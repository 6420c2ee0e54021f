// Package stress is the kit the stress scenarios are built from: the load
// generators and checks both scenario families share, and the helpers their
// configs and reports share. The scenarios themselves live by what they
// stress: package engine (inferrail-bench stress) drives an inferrail-sim
// child, package gateway (inferrail-bench gwstress) an inferrail-gateway
// child in front of simulators. Each writes <scenario>.json per scenario and
// regenerates a README.md of the results next to them.
//
// RunStreams opens many concurrent streamed chat requests at once and reads
// every stream to its end; RunSoak sends a long mixed workload (chat and
// completions, streamed or not, varied prompts with shared prefixes, some
// left by the client) at bounded concurrency, following a process's
// resident memory. Both take a base URL, so tests can point them at an
// in-process simulator or at a port where nothing listens. ReadStream and
// CheckFull check an answer as every scenario does. Targets are reported as
// measured figures, never asserted against a clock: the machines these run
// on are shared.
package stress
