// Package decisionlog is the gateway's decision log: the routing decisions
// of sampled requests, one JSON line each, written by a goroutine of its
// own to a file rotated by size.
//
// Requests are sampled by ID, so every attempt of a request is logged or
// none is, and two gateways sample the same requests. Logging a record
// never waits: records go to a bounded queue, and when the writer falls
// behind (a slow or full disk) a record that finds the queue full is
// dropped and counted. A Record has no field for the prompt or any other
// text of the request.
package decisionlog
