# Inferrail. `make demo` runs the main job, `make test` passes the tests.
export GOTOOLCHAIN := go1.27.3
export CGO_ENABLED := 0

GO        ?= go
BIN       := bin
CMDS      := inferrail-sim inferrail-gateway inferrail-bench inferrail-calibrate
FUZZTIME  ?= 30s
# Every fuzz target as package:Target.
FUZZ_TARGETS := \
	./internal/tokenize/simtok:FuzzSimEncode \
	./internal/tokenize/hf:FuzzHFEncode \
	./internal/tokenize/hf:FuzzHFScanners \
	./internal/tokenize/hf:FuzzLoadTokenizer \
	./internal/tokenize/hf:FuzzTranslateRegex \
	./internal/tokenize/chattemplate:FuzzChatRender \
	./internal/tokenize/chattemplate:FuzzOverrideFilters \
	./internal/tokenize:FuzzParseChatRequestAgainstReference \
	./internal/tokenize:FuzzParseCompletionRequestAgainstReference \
	./internal/tokenize/chattemplate:FuzzJSONValueAgainstStream \
	./internal/tokenize/chattemplate:FuzzInstrument \
	./internal/tokenize/chattemplate:FuzzDetectContentFormat \
	./internal/tokenize/chattemplate:FuzzPyPercent \
	./internal/openai:FuzzSSEReader \
	./internal/openai:FuzzEndsWithDone \
	./internal/sim:FuzzChatRequest \
	./internal/sim:FuzzCompletionRequest \
	./internal/sim:FuzzHTTP \
	./internal/pyjson:FuzzDecode \
	./internal/pyjson:FuzzZeroed \
	./internal/openai:FuzzFindModel \
	./internal/openai:FuzzArrayPromptTokens \
	./internal/openai:FuzzPrompts \
	./internal/config:FuzzParse \
	./internal/config:FuzzPatch \
	./internal/gateway:FuzzClientPort \
	./internal/load:FuzzParse \
	./internal/load:FuzzParseAgainstLibrary \
	./internal/workload:FuzzTrace \
	./internal/capture:FuzzLine \
	./internal/zmtp:FuzzReadFrames \
	./internal/kvfeed:FuzzReplayMessage \
	./internal/events:FuzzDecodeBatch \
	./internal/auth:FuzzParse \
	./internal/auth:FuzzParseBearer \
	./internal/gateway:FuzzClientPortKeyed \
	./internal/gateway:FuzzAdmissionHeaders \
	./internal/gateway:FuzzAdminRequests \
	./internal/gateway:FuzzReplayShadow \
	./internal/sim:FuzzKVEventsConfig \
	./internal/workload:FuzzShareGPT \
	./internal/bench:FuzzTail \
	./internal/gateway:FuzzUsageTail

.PHONY: all build test lint vet fmt-check staticcheck vulncheck unit race norace fuzz bench stress saturated demo clean tokenizers fleet-size \
	sweep sweep-smoke routing baselines exact-routing criterion report repro peers dashboard-check stack stack-down

all: build

# The commit the binaries name (--version, inferrail_build_info), stamped by
# hand: Go's own VCS stamp is off wherever GOFLAGS has -buildvcs=false.
STAMP = -X github.com/inferrail/inferrail/internal/cli.stampedRevision=$(shell git rev-parse HEAD 2>/dev/null) \
	-X github.com/inferrail/inferrail/internal/cli.stampedModified=$(shell git status --porcelain --untracked-files=no 2>/dev/null | grep -q . && echo true)

build:
	@mkdir -p $(BIN)
	$(GO) build -trimpath -ldflags '$(STAMP)' -o $(BIN)/ $(addprefix ./cmd/,$(CMDS))

## test: lint (gofmt, vet, staticcheck, govulncheck), then every test with the race detector (fuzz
## targets' seed corpora included) and again without it those the detector makes meaningless, and
## the end-to-end tests with the OpenAI Python SDK; it prints each step's time and the total
## (scripts/test.sh, which also fetches the tokenizer files and the e2e venv while lint runs).
test:
	@./scripts/test.sh

## e2e-python: the official OpenAI Python SDK, sync and async, against a simulator and the gateway
## (tests/e2e; it builds .venv/e2e from pinned, hashed wheels on first use).
.PHONY: e2e-python
e2e-python:
	./tests/e2e/run.sh

## tokenizers: the pinned Hugging Face tokenizer files the tokenize tests read (.cache/tokenizers).
tokenizers:
	./scripts/fetch-tokenizers.sh

lint: fmt-check vet staticcheck vulncheck

## check, audit, e2e: the specification's names for lint, vulncheck and the SDK end-to-end tests.
.PHONY: check audit e2e
check: lint
audit: vulncheck
e2e: e2e-python

## vulncheck: govulncheck against the Go vulnerability database pinned in scripts/vulncheck.sh.
vulncheck:
	./scripts/vulncheck.sh

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

staticcheck:
	$(GO) tool staticcheck ./...

# The race detector needs cgo (gcc is on every machine we build on).
race:
	CGO_ENABLED=1 $(GO) test -race -shuffle=on -timeout 20m ./...

# Targets that load every tokenizer family before their first input: their
# baseline alone outlasts a smoke's few seconds (25 s did not get FuzzHFEncode
# past it on a busy machine), so the smoke leaves them to `make fuzz`; their
# seed corpora run as tests in `make race` all the same.
FUZZ_SLOW_START := FuzzHFEncode FuzzChatRender

# Tests that skip under the race detector, whose sync.Pool drops items on purpose and which slows
# timing-sensitive runs: allocation counts, a run on a faster clock, the KV event floods, the
# gateway over a Hugging Face tokenizer (four loads of it take 50 s under the detector, one 12 s; the
# gateway process started over Gemma 3's, 10 s), and the
# long single-goroutine tokenizer, chat template, workload and fleet-simulation checks, where the
# detector has nothing to find and costs minutes. house's TestRaceSkipsRunInNorace fails when a test
# skips under the detector and is not listed here.
norace:
	$(GO) test -count=1 -run '^(TestMatchAllocatesNothing|TestSpeedupMatchesRealTime|TestCaptureReplay|TestHostileStoredFlood|TestHostileFastFlood|TestHFTokenizer|TestTokenCheckPassesOverABrokenChatTemplate|TestTokenCheckComparesChatsTheTemplateRefuses|TestAdminTokenizeBounded|TestHFUnicodeTables|TestHFCacheEqualsUncached|TestChatGoldens|TestRenderStops|TestRenderMaxOutput|TestParseTenThousand|TestRequestRate|TestRequestsCut|TestSharedPromptShape|TestRAGShape|TestHFSynthetic|TestHFSyntheticCached|TestJSONMatchesYAML|TestSameMatchesJSON|TestPatchMatchesFileParser|TestChatSpecialTokens|FuzzChatRender|TestHFScanners|TestHFGoldenCases|TestHFNormalizeExact|TestOnigTables|TestOracleByWorkload|TestSessions|TestDeterministic|TestArrivalGaps|TestFleetZipf|TestFleetChats|TestBlockDoesNotAllocate|TestDecodeAllocatesNothing|TestDecodeAllocatesASmallMultiple|TestReadAllSized|TestLongPromptRefusedUntokenized|TestAnnouncedSizeNotTakenOnTrust|TestLazyTraceHeldHeap|TestOpenLoopHeldHeap|TestSIGHUPWhileStarting|TestDeepTemplatesDoNotCompile)$$' \
	  ./cmd/inferrail-gateway ./internal/index ./internal/bench ./internal/gateway ./internal/tokenize/hf ./internal/tokenize/chattemplate ./internal/auth ./internal/workload ./internal/config \
	  ./internal/policy ./internal/enginehash ./internal/events ./internal/sim

# A few seconds of mutation per fuzz target (not part of `make test`, whose race step runs their
# seed corpora); `make fuzz` runs longer.
fuzz-smoke:
	@$(MAKE) --no-print-directory fuzz FUZZTIME=3s SMOKE=1

# Every target runs, a failing one too, and the failures are named at the end: stopping at the
# first left the targets after it unfuzzed. Minimizing a new input is bounded, or its default minute
# takes most of a short run.
fuzz:
	@failed=""; for t in $(FUZZ_TARGETS); do \
	  pkg=$${t%%:*}; name=$${t##*:}; time=$(FUZZTIME); \
	  case " $(FUZZ_SLOW_START) " in *" $$name "*) if [ -n "$(SMOKE)" ]; then \
	    echo "fuzz $$pkg $$name: skipped in the smoke (slow start; make fuzz runs it)"; continue; fi;; esac; \
	  echo "fuzz $$pkg $$name ($$time)"; \
	  $(GO) test $$pkg -run '^$$' -fuzz "^$$name$$" -fuzztime $$time -fuzzminimizetime 5s || failed="$$failed $$t"; \
	done; \
	if [ -n "$$failed" ]; then echo "fuzz: FAILED:$$failed"; exit 1; fi

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

stress: build
	$(GO) run ./cmd/inferrail-bench stress --sim-binary $(BIN)/inferrail-sim --out bench/results/sim
	$(GO) run ./cmd/inferrail-bench gwstress --gateway-binary $(BIN)/inferrail-gateway --sim-binary $(BIN)/inferrail-sim --out bench/results/gateway
	./tests/e2e/run.sh --stress --out bench/results/python-sdk

## saturated: `make test` ten times in a row (RUNS=n), each beside one busy loop per core, so every
## core is saturated; the table goes to bench/results/saturated (5-7 minutes a run on 2 cores;
## passed runs of the same commit resume, DEADLINE=hh:mm starts none after that time).
saturated:
	./scripts/saturated.sh

## demo: round_robin against cost_model on a short W1 run, each on a cold fleet of three simulators
## behind the gateway (about 2 minutes); a table, a chart and a report under bench/tmp/demo.
demo: build
	./scripts/demo.sh

# Benchmark sweeps (not part of `make test`). Each resumes: runs whose result
# file records the same spec are skipped. JOBS fleets run side by side.
JOBS  ?= 1
# TRACE names a Mooncake-format trace (JSONL) for the sweep's trace point; the
# public one is not in the repository, so it is given by path.
TRACE ?=
BENCH := $(BIN)/inferrail-bench
BENCH_BINS := --sim-binary $(BIN)/inferrail-sim --gateway-binary $(BIN)/inferrail-gateway --jobs $(JOBS)

## sweep: bench/sweeps/sim.toml (every policy, every workload, the trace when TRACE names it), then its report.
sweep: build
	$(BENCH) sweep --file bench/sweeps/sim.toml $(BENCH_BINS) $(if $(TRACE),--trace $(TRACE))
	$(BENCH) report --in bench/results/sweep --out bench/report/sweep

## fleet-size: the smallest fleet each policy needs for W1, W2 and the trace at a fixed load
## (bench/sweeps/fleet-size.toml; TRACE=path adds the trace point), and the GPUs it saves.
fleet-size: build
	$(BENCH) sweep --file bench/sweeps/fleet-size.toml $(BENCH_BINS) $(if $(TRACE),--trace $(TRACE))
	$(BENCH) report --in bench/results/fleet-size --out bench/report/fleet-size

## sweep-smoke: a one-minute sweep that checks the machinery.
sweep-smoke: build
	$(BENCH) sweep --file bench/sweeps/smoke.toml $(BENCH_BINS)
	$(BENCH) report --in bench/results/smoke --out bench/report/smoke

## routing: every policy on W1, W2, W6, mix and hot, 3 repetitions. Runs the committed sweep
## already holds with the same spec are copied from bench/results/sweep instead of run again.
routing: build
	$(BENCH) sweep --file bench/sweeps/routing.toml $(BENCH_BINS) --reuse bench/results/sweep
	$(BENCH) report --in bench/results/routing --out bench/report/routing

## baselines: the four cache-blind baselines on W1, W2 and W6 (reusing the sweep's runs likewise).
baselines: build
	$(BENCH) sweep --file bench/sweeps/baselines.toml $(BENCH_BINS) --reuse bench/results/sweep
	$(BENCH) report --in bench/results/baselines --out bench/report/baselines

## exact-routing: cost_model and kv_aware under the approximate and the exact index, side by side
## with both peer routers, on W2 at 12 req/s and hot at 15 (bench/sweeps/exact.toml), 3 repetitions.
exact-routing: build
	$(BENCH) sweep --file bench/sweeps/exact.toml $(BENCH_BINS)
	$(BENCH) report --in bench/results/exact-routing --out bench/report/exact-routing

## criterion: #21's test alone (bench/sweeps/criterion.toml): every policy and both peers at each
## workload's median rate, least_request against cost_model at its highest, 3 repetitions (the
## trace's points when TRACE names it). Its report's "Where we lose" judges each point at its one rate
## against the lowest; a -top point's comparison with least_request is read from its table.
criterion: build
	$(BENCH) sweep --file bench/sweeps/criterion.toml $(BENCH_BINS) $(if $(TRACE),--trace $(TRACE))
	$(BENCH) report --in bench/results/criterion --out bench/report/criterion

## report: rebuild every report from the result files in bench/results.
report: build
	@for d in sweep routing baselines exact-routing smoke criterion; do \
	  if [ -d bench/results/$$d ]; then $(BENCH) report --in bench/results/$$d --out bench/report/$$d; fi; \
	done

## peers: the peer routers' venv (.venv/peers, pinned by bench/peers/requirements.txt; made on first
## use, as inferrail-bench does before a run whose policy is peer:<router>:<policy>), then a tiny run
## through each router and policy. Not part of make test: the venv takes a download.
peers:
	./bench/peers/venv.sh
	$(GO) test ./internal/bench -run '^TestPeerRouters$$' -count=1 -v

## repro: the same small point twice on fresh fleets must agree within 3%.
repro:
	$(GO) test ./internal/bench -run '^TestReproducible$$' -count=1 -v

## dashboard-check: dashboards/inferrail.json decoded strictly against Grafana's schema (its Foundation
## SDK, behind the grafanaschema build tag for its compile time); then every query of it asked of a
## real Prometheus that scrapes a gateway and three simulators through a short W1 run and the events
## the panels show, and the same Prometheus loading make stack's prometheus.yml (about a minute; not
## part of make test). It runs `prometheus` from PATH, else PROMETHEUS_VERSION built once into
## .cache/bin without its service discovery (about 10 minutes on 2 cores); when neither can be had
## it says SKIPPED and exits 0.
PROMETHEUS_VERSION := v0.316.0
PROMETHEUS_RELEASE := 3.16.0
dashboard-check:
	$(GO) vet -tags grafanaschema ./dashboards
	$(GO) tool staticcheck -tags grafanaschema ./dashboards
	$(GO) test -tags grafanaschema ./dashboards -run '^TestDashboardMatchesGrafanaSchema$$' -count=1 -v
	@prom=$$(command -v prometheus || true); \
	if [ -z "$$prom" ]; then \
	  prom=$(CURDIR)/.cache/bin/prometheus; \
	  if [ ! -x "$$prom" ]; then \
	    echo "dashboard-check: no prometheus on PATH; building Prometheus $(PROMETHEUS_RELEASE) into .cache/bin"; \
	    GOBIN=$(CURDIR)/.cache/bin $(GO) install -tags remove_all_sd \
	      -ldflags '-X github.com/prometheus/common/version.Version=$(PROMETHEUS_RELEASE)' \
	      github.com/prometheus/prometheus/cmd/prometheus@$(PROMETHEUS_VERSION) || { \
	      echo "dashboard-check: SKIPPED: no prometheus on PATH and building one failed"; exit 0; }; \
	  fi; \
	fi; \
	echo "dashboard-check: $$prom"; \
	INFERRAIL_PROMETHEUS=$$prom $(GO) test ./dashboards ./deploy/compose -run '^TestRealPrometheus' -count=1 -v

## stack: three simulators, the gateway (cost_model, with least_request and prefix_hash in shadow),
## Prometheus, Grafana with the dashboard, and Jaeger, published on 127.0.0.1 only (deploy/compose;
## needs Docker with compose). Grafana on :3000, gateway on :8080 (admin :9090), Prometheus on
## :9091, Jaeger on :16686. stack-down stops it.
COMPOSE := docker compose -f deploy/compose/compose.yaml
stack:
	INFERRAIL_REVISION=$(shell git rev-parse HEAD 2>/dev/null) \
	INFERRAIL_MODIFIED=$(shell git status --porcelain --untracked-files=no 2>/dev/null | grep -q . && echo true) \
	$(COMPOSE) up --build --detach
	@echo "Grafana http://localhost:3000 (dashboard Inferrail), gateway http://localhost:8080, Prometheus http://localhost:9091, Jaeger http://localhost:16686"

stack-down:
	$(COMPOSE) down

clean:
	rm -rf $(BIN)
