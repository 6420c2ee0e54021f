// Package gateway holds the gateway stress scenarios, behind
// inferrail-bench gwstress: each runs against a fresh inferrail-gateway
// child process in front of simulators (children, in-process simulators
// the scenario can kill or break, or the harness's own firehose engine):
// streams, overhead, the plain-proxy floor, routing, replica kills, hangs
// and flaps, client disconnects, hostile clients, a soak, slow readers and
// a slow request body.
//
// Run writes <scenario>.json per scenario into the results directory, each
// with the scenario's targets and whether the run met them, and
// regenerates its README.md (WriteReport).
package gateway
