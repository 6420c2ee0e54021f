// Package dashboards holds the Grafana dashboard of the gateway and its
// engines, inferrail.json, which the compose stack (deploy/compose)
// provisions. The file is written from a table in the package's tests,
// which also parse every query with Prometheus's own parser, check every
// metric it names against the live pages of a gateway and simulators, and,
// under make dashboard-check, evaluate every query on a real Prometheus.
package dashboards

import _ "embed"

// JSON is inferrail.json, the dashboard as Grafana imports it.
//
//go:embed inferrail.json
var JSON []byte
