// Package fleet is the gateway's view of its replicas: who they are (static
// replicas and DNS groups), how loaded they are (leases that count requests
// in flight and waiting for a response head, never past their caps) and
// whether they may be used (active probes and passive ejection).
package fleet
