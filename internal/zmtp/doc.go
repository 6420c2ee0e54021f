// Package zmtp is a small pure-Go implementation of ZeroMQ's wire protocol,
// ZMTP 3.x (3.1 advertised, 3.0 peers accepted) over TCP with the NULL
// security mechanism, and of the four socket types Inferrail needs to carry
// vLLM's KV event stream: PUB and ROUTER on the publisher side (the
// simulator), SUB and DEALER on the consumer side (the gateway, which
// subscribes to the events and asks the ROUTER for a replay after a gap).
// Payloads are opaque here; package events decodes them.
//
// Why our own instead of github.com/go-zeromq/zmq4: its frame reader
// allocates whatever 64-bit size a peer's frame header claims before reading
// a byte of the body, so one garbage or hostile publisher takes the gateway
// down with an unrecoverable out-of-memory; it has no maximum message size,
// and it has been unmaintained since mid-2024. This package bounds every
// message (Options.MaxMessageSize, counted over the whole multipart message
// plus a fixed cost per frame), grows a body's buffer only as its bytes
// arrive, closes a connection that breaks the protocol without disturbing
// the socket's other peers, and owns every goroutine it starts: Close (or
// the end of the context a socket was made with) stops them all.
//
// The wire format (greeting, READY/ERROR/SUBSCRIBE/CANCEL/PING commands,
// short and long frames) is a set of pure functions over bytes in wire.go,
// fuzzed without sockets. Semantics follow libzmq where the RFCs leave a
// choice: a PUB drops a message for a peer whose queue is full and never
// blocks, a SUB and a DEALER reconnect with backoff, a ROUTER names a peer
// by its Identity property or a generated 5-byte one and drops messages to
// unknown peers (reporting it to the caller).
package zmtp
