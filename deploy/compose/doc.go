// Package compose is the stack make stack brings up with Docker Compose:
// compose.yaml, the Dockerfile of the inferrail image, and the gateway,
// Prometheus and Grafana configs beside them. It holds no code; its tests
// check, without Docker, that those files are valid and agree with each
// other, with the Makefile and with the dashboard.
package compose
