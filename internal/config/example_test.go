package config_test

import (
	"fmt"
	"time"

	"github.com/inferrail/inferrail/internal/config"
)

func ExampleParse() {
	cfg, err := config.Parse([]byte(`
models:
  - name: inferrail/sim-8b
    aliases: [sim]
replicas:
  - id: sim-1
    url: http://127.0.0.1:8001/
    models: [inferrail/sim-8b]
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	name, _ := cfg.ResolveModel("sim")
	r := cfg.Replicas[0]
	fmt.Println(name, cfg.ModelSplit("sim")[0].Policy)
	fmt.Println(r.URL, r.MaxConcurrency, r.MaxPending)
	fmt.Println(time.Duration(cfg.Server.RequestTimeout), cfg.Health.Timeout)
	// Output:
	// inferrail/sim-8b least_request
	// http://127.0.0.1:8001 256 64
	// 1m0s 500ms
}

func ExampleParse_errors() {
	_, err := config.Parse([]byte(`
models:
  - name: inferrail/sim-8b
replicas:
  - id: sim-1
    url: 127.0.0.1:8001
    models: [sim]
    max_pending: 1000
health:
  interval: 5
  timout: 1s
`))
	fmt.Println(err)
	// Output:
	// line 3: models[0]: no replica or dns group serves it
	// line 6: replicas[0].url: must be an absolute http or https URL
	// line 7: replicas[0].models[0]: "sim" is not a configured model
	// line 8: replicas[0].max_pending: must be <= max_concurrency (256)
	// line 10: health.interval: must have a unit, such as 250ms or 2s
	// line 11: health.timout: unknown key
}
