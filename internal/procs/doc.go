// Package procs starts and stops the child processes the benchmark harness
// and the stress scenarios drive: inferrail-sim (StartSim), inferrail-gateway
// with a generated config (StartGateway) and the peer routers vllm-router
// and sglang-router from their venv (StartPeer), each on free loopback
// ports and retried when another process takes a port first. It also reads
// what the harness follows of them: their logs (GatewayLog, PeerLog), their
// Prometheus pages (ScrapePage, read by the Prometheus library's own
// parser), and from /proc their resident memory, open
// files, held connections and CPU time, and the machine's CPU share
// (MachineShare).
//
// Package procstest lets tests start these children from the test binary
// itself.
package procs
