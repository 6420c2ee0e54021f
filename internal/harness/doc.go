// Package harness is what the benchmark runs (package bench) and the
// stress scenarios (package stress and its scenario packages) share to
// drive real processes: one open-loop driver (Loop), one fleet starter
// (Fleet: simulator children behind a gateway or peer router child, with
// the gateway config both generate, GatewayConfig) and one results writer
// (WriteJSON, ReadJSON, ReadDir).
package harness
