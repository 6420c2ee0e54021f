package gateway

import (
	_ "embed"
	"text/template"
	"time"

	"github.com/inferrail/inferrail/internal/stress"
)

// Gateway stress scenario names, in the order Run runs them.
const (
	ScenarioStreams     = "gw-streams"
	ScenarioOverhead    = "gw-overhead"
	ScenarioObserve     = "gw-observability"
	ScenarioFloor       = "gw-floor"
	ScenarioRouting     = "gw-routing"
	ScenarioKill        = "gw-kill"
	ScenarioHang        = "gw-hang"
	ScenarioFlap        = "gw-flap"
	ScenarioDisconnects = "gw-disconnects"
	ScenarioHostile     = "gw-hostile"
	ScenarioSoak        = "gw-soak"
	ScenarioSlowReaders = "gw-slow-readers"
	ScenarioSlowBody    = "gw-slow-body"
	ScenarioControl     = "gw-control"
	ScenarioFlow        = "gw-flow"
	ScenarioSizes       = "gw-sizes"
	ScenarioTokenFlood  = "gw-tokenize-flood"
	ScenarioFleet       = "gw-fleet"
	ScenarioScrape      = "gw-scrape"
	ScenarioChurn       = "gw-churn"
	ScenarioSessions    = "gw-sessions"
)

// What scenarios start beyond the gateway (Scenario.Needs).
const (
	needSims  = "sim_binary"   // simulator children
	needBench = "bench_binary" // inferrail-bench's plain-proxy or fake-engines
)

// scenarios are the gateway stress scenarios, in the order Run runs them.
var scenarios = []stress.Scenario[Config, *gwRun]{
	{Name: ScenarioStreams, Stresses: "the streaming path and the spread of a burst of concurrent streams over three replicas",
		Params: "streams", Load: func(c *Config) stress.Validator { return c.Streams }, Needs: []string{needSims}, Run: runGWStreams},
	{Name: ScenarioOverhead, Stresses: "the latency the gateway adds to an open-loop schedule, against the simulator straight",
		Params: "overhead", Load: func(c *Config) stress.Validator { return c.Overhead }, Needs: []string{needSims},
		Setup: simFleetOf(3, overheadSimArgs, nil), Run: runGWOverhead},
	{Name: ScenarioObserve, Stresses: "the latency traces exported to an unreachable collector and a full decision log add, against a gateway without them",
		Params: "observe", Load: func(c *Config) stress.Validator { return c.Observe }, Needs: []string{needSims},
		Setup: observabilitySetup, Run: runGWObservability},
	{Name: ScenarioFloor, Stresses: "the CPU a request costs the gateway, against a bare net/http reverse proxy",
		Params: "floor", Load: func(c *Config) stress.Validator { return c.Floor }, Needs: []string{needSims, needBench},
		Setup: simFleetOf(3, overheadSimArgs, nil), Run: runGWFloor},
	{Name: ScenarioRouting, Stresses: "the latency tokenization, the KV index and the cache-aware policies add",
		Params: "routing", Load: func(c *Config) stress.Validator { return c.Routing }, Needs: []string{needSims}, Run: runGWRouting},
	{Name: ScenarioKill, Stresses: "how soon a killed replica leaves rotation, and comes back once restarted",
		Params: "kill", Load: func(c *Config) stress.Validator { return c.Kill }, Run: runGWKill},
	{Name: ScenarioHang, Stresses: "requests waiting on a replica that stops answering",
		Params: "hang", Load: func(c *Config) stress.Validator { return c.Hang }, Run: runGWHang},
	{Name: ScenarioFlap, Stresses: "retries over a replica flipping between healthy and failing",
		Params: "flap", Load: func(c *Config) stress.Validator { return c.Flap }, Run: runGWFlap},
	{Name: ScenarioDisconnects, Stresses: "clients that leave mid-stream: their engine requests must end too",
		Params: "disconnects", Load: func(c *Config) stress.Validator { return c.Disconnects }, Needs: []string{needSims},
		Setup: simFleetOf(3, nil, nil), Run: runGWDisconnects},
	{Name: ScenarioHostile, Stresses: "the HTTP server against malformed, huge, slow and garbage requests",
		Params: "hostile", Load: func(c *Config) stress.Validator { return c.Hostile }, Needs: []string{needSims},
		Setup: simFleetOf(3, []string{"--zero-latency"}, hostileTimeouts), Run: runGWHostile},
	{Name: ScenarioSoak, Stresses: "the gateway's memory and connections over a long mixed workload",
		Params: "soak", Load: func(c *Config) stress.Validator { return c.Soak }, Needs: []string{needSims},
		Setup: simFleetOf(3, []string{"--zero-latency"}, nil), Run: runGWSoak},
	{Name: ScenarioSlowReaders, Stresses: "clients that stop reading their streams: the gateway's memory and the other clients",
		Params: "slow_readers", Load: func(c *Config) stress.Validator { return c.SlowReaders }, Needs: []string{needSims}, Run: runGWSlowReaders},
	{Name: ScenarioSlowBody, Stresses: "a large request body written a byte at a time",
		Params: "slow_body", Load: func(c *Config) stress.Validator { return c.SlowBody }, Needs: []string{needSims},
		Setup: simFleetOf(1, []string{"--zero-latency"}, slowBodyLimits), Run: runGWSlowBody},
	{Name: ScenarioControl, Stresses: "the live control plane under traffic: shadows and their log beside none, a storm of config patches and admin reads",
		Params: "control", Load: func(c *Config) stress.Validator { return c.Control }, Needs: []string{needSims},
		Setup: controlSetup, Run: runGWControl},
	{Name: ScenarioFlow, Stresses: "flow control and SLO admission past saturation: a flooding tenant beside a quiet one, W1 with a TTFT target, each beside no flow control",
		Params: "flow", Load: func(c *Config) stress.Validator { return c.Flow }, Needs: []string{needSims}, Run: runGWFlow},
	{Name: ScenarioSizes, Stresses: "request parsing, chat template rendering and tokenization against huge messages, many messages, many tools and deep arguments",
		Params: "sizes", Load: func(c *Config) stress.Validator { return c.Sizes }, Needs: []string{needSims}, Run: runGWSizes},
	{Name: ScenarioTokenFlood, Stresses: "one tokenizer worker against a flood of long prompts: the queue, the wait and routing without a prediction",
		Params: "tokenize_flood", Load: func(c *Config) stress.Validator { return c.TokenFlood }, Needs: []string{needSims}, Run: runGWTokenFlood},
	{Name: ScenarioFleet, Stresses: "how old the engine reports are that decisions read: three engines, 64 replicas, and healthy replicas beside 20 serving huge or endless pages",
		Params: "fleet", Load: func(c *Config) stress.Validator { return c.Fleet }, Needs: []string{needBench}, Run: runGWFleet},
	{Name: ScenarioScrape, Stresses: "the gateway's own /metrics read 100 times a second during a burst of streams: every page consistent",
		Params: "scrape", Load: func(c *Config) stress.Validator { return c.Scrape }, Needs: []string{needSims},
		Setup: simFleetOf(3, []string{"--max-num-seqs", "1024"}, nil), Run: runGWScrape},
	{Name: ScenarioChurn, Stresses: "8,000 replicas joining and leaving through DNS discovery under traffic: the metrics page's size and render time",
		Params: "churn", Load: func(c *Config) stress.Validator { return c.Churn }, Needs: []string{needBench}, Run: runGWChurn},
	{Name: ScenarioSessions, Stresses: "conversations over Zipf-popular system prompts with session affinity and explain requests mixed in: balance and stickiness",
		Params: "sessions", Load: func(c *Config) stress.Validator { return c.Sessions }, Needs: []string{needSims},
		Setup: sessionsSetup, Run: runGWSessions},
}

// Scenarios lists the gateway stress scenarios' names in the order Run
// runs them.
var Scenarios = stress.Names(scenarios)

//go:embed descriptions.tmpl
var descriptionsText string

// descriptions say what each scenario does with its load
// (descriptions.tmpl).
var descriptions = stress.ParseDescriptions(descriptionsText, template.FuncMap{
	"overheadLegOrder":      func() []string { return overheadLegOrder[:] },
	"observabilityLegOrder": func() []string { return observabilityLegOrder[:] },
	"floorLegOrder":         func() []string { return floorLegOrder[:] },
	"controlShadows":        func() []string { return controlShadows },
	"fairWindow":            func() time.Duration { return fairWindow },
	"readFirstKiB":          func() int { return readFirst >> 10 },
})
