# Inferrail. `make demo` runs the main job, `make test` passes the tests.
export GOTOOLCHAIN := go1.27.3
export CGO_ENABLED := 0

GO        ?= go
BIN       := bin
CMDS      := inferrail-sim inferrail-gateway inferrail-bench inferrail-calibrate
FUZZTIME  ?= 30s
# Every fuzz target as package:Target.
FUZZ_TARGETS := \
	./internal/tokenize:FuzzSimEncode \
	./internal/tokenize:FuzzHFEncode \
	./internal/tokenize:FuzzHFScanners \
	./internal/openai:FuzzSSEReader \
	./internal/sim:FuzzChatRequest \
	./internal/sim:FuzzCompletionRequest \
	./internal/sim:FuzzHTTP \
	./internal/openai:FuzzFindModel \
	./internal/config:FuzzParse \
	./internal/gateway:FuzzClientPort \
	./internal/load:FuzzParse \
	./internal/load:FuzzParseAgainstLibrary

.PHONY: all build test lint vet fmt-check staticcheck unit race fuzz bench stress demo clean tokenizers

all: build

build:
	@mkdir -p $(BIN)
	$(GO) build -trimpath -o $(BIN)/ $(addprefix ./cmd/,$(CMDS))

## test: lint, then every test with the race detector, then a short run of each fuzz target.
test: tokenizers lint race fuzz-smoke

## tokenizers: the pinned Hugging Face tokenizer files the tokenize tests read (.cache/tokenizers).
tokenizers:
	./scripts/fetch-tokenizers.sh

lint: fmt-check vet staticcheck

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

# A few seconds per fuzz target inside `make test`; `make fuzz` runs longer.
fuzz-smoke:
	@$(MAKE) --no-print-directory fuzz FUZZTIME=3s

fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
	  pkg=$${t%%:*}; name=$${t##*:}; \
	  echo "fuzz $$pkg $$name ($(FUZZTIME))"; \
	  $(GO) test $$pkg -run '^$$' -fuzz "^$$name$$" -fuzztime $(FUZZTIME); \
	done

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

stress: build
	$(GO) run ./cmd/inferrail-bench stress --sim-binary $(BIN)/inferrail-sim --out bench/results/sim
	$(GO) run ./cmd/inferrail-bench gwstress --gateway-binary $(BIN)/inferrail-gateway --sim-binary $(BIN)/inferrail-sim --out bench/results/gateway

demo: build
	./scripts/demo.sh

clean:
	rm -rf $(BIN)
