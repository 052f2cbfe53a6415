# hermes-host build. `make serve` and `make test` are the two set-up commands of the README.
GO ?= go
PLUGINS := $(notdir $(wildcard plugins/*))
WASM := $(PLUGINS:%=build/plugins/%.wasm)

.PHONY: all plugins serve test soak bench vet fmt clean tools FORCE

# After building, the plugins are compiled into the default compilation cache
# (.hermes/cache/wazero), as serve would compile them: the first serve then starts in well under
# a second instead of compiling for several.
all: bin/hermes-host bin/hermes-conformance plugins
	./bin/hermes-host plugins compile --plugins build/plugins --log-level error

bin/hermes-host: FORCE
	$(GO) build -o $@ ./cmd/hermes-host

# The conformance suite and its platform fakes are a binary of their own, kept out of the gateway.
bin/hermes-conformance: FORCE
	$(GO) build -o $@ ./cmd/hermes-conformance

# First-party plugins are built from source with the standard Go toolchain, never committed.
plugins: $(WASM)

build/plugins/%.wasm: FORCE
	@mkdir -p build/plugins
	GOOS=wasip1 GOARCH=wasm $(GO) build -buildmode=c-shared -trimpath -o $@.tmp ./plugins/$*
	@mv $@.tmp $@

# Run the gateway on the embedded defaults with the first-party plugins.
serve: all
	./bin/hermes-host serve --plugins build/plugins

vet:
	@$(GO) mod tidy -diff >/dev/null || ($(GO) mod tidy -diff; echo "go.mod/go.sum are not tidy: run go mod tidy"; exit 1)
	$(GO) vet ./...
	GOOS=wasip1 GOARCH=wasm $(GO) vet ./sdk/... ./plugins/...
	@# The benchmark-only build without wazero's deadline check (RATIONALE.md) keeps compiling.
	$(GO) vet -tags hermes_nodeadlinecheck ./internal/plugin
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1)

# Tools some tests need beyond Go, installed when missing: npm (the AssemblyScript example) and
# Debian's chromium (the console's browser tests).
tools:
	@command -v npm >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq nodejs npm)
	@command -v chromium >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq chromium)

# Every test, race detector on. Tests build the plugins they load (cached by source hash).
# HERMES_REQUIRE_TOOLS makes a test whose tool is missing fail instead of skipping; the browser
# tests' screenshots go to HERMES_TEST_ARTIFACTS (never committed). scripts/with-postgres runs
# the tests with a temporary PostgreSQL cluster (installing Debian's postgresql when missing)
# unless HERMES_TEST_POSTGRES already names a server.
HERMES_TEST_ARTIFACTS ?= $(CURDIR)/build/test-artifacts
# HERMES_COMPILATION_CACHE is one compilation cache for every host the tests start (in-process
# worlds and `serve` alike): a plugin is compiled once per run, not once per test.
HERMES_COMPILATION_CACHE ?= $(CURDIR)/build/cache/wazero
# HERMES_TEST_DEADLINE_SCALE stretches the wall-clock deadlines of tests that use
# internal/testdeadline: every package runs at once here, so a healthy run may be this many
# times slower than the same test run alone on a quiet machine.
HERMES_TEST_DEADLINE_SCALE ?= 3
# go test starts packages in the order they are named, TEST_P at a time: the longest ones (the
# end-to-end tests, the promise checker, then the slowest unit packages) go first, so that none
# of them starts last and runs alone at the end. Three at a time on two cores: with two, a
# quarter of the CPU stayed idle (74% busy, measured), the packages that wait for real hosts,
# processes and platforms holding their slot while they wait.
TEST_P ?= 3
TEST_FIRST := ./internal/e2e ./internal/sim ./internal/session ./internal/gateway ./internal/turn \
	./conformance/yuanbao ./internal/plugin ./plugins/yuanbao
# The tests build the binaries and plugins they run (from source, cached by content), so test
# does not build them first.
test: vet tools
	HERMES_REQUIRE_TOOLS=1 HERMES_TEST_ARTIFACTS=$(HERMES_TEST_ARTIFACTS) HERMES_COMPILATION_CACHE=$(HERMES_COMPILATION_CACHE) \
		HERMES_TEST_DEADLINE_SCALE=$(HERMES_TEST_DEADLINE_SCALE) \
		scripts/with-postgres $(GO) test -race -p $(TEST_P) -timeout 30m $(TEST_FIRST) ./...
	@# Resident-memory measurements again without -race, whose shadow memory stays resident.
	HERMES_COMPILATION_CACHE=$(HERMES_COMPILATION_CACHE) $(GO) test -count=1 -run 'TestStackOverflowGivesMemoryBack' ./internal/plugin

# The promise checker (internal/sim) for SOAK (default 30m): schedules one after another, on one
# SQLite host and on two or three hosts sharing PostgreSQL, with a report every minute. SOAK_AIM
# adds kinds of step to the mix (internal/sim/schedule.go: weights); by default processes that
# outlive their conversation, which plain schedules make only by chance.
SOAK ?= 30m
SOAK_AIM ?= outlive=4
soak:
	HERMES_REQUIRE_TOOLS=1 HERMES_COMPILATION_CACHE=$(HERMES_COMPILATION_CACHE) \
		scripts/with-postgres $(GO) test -run 'TestPromise$$' -count 1 -timeout 0 -v ./internal/sim -soak $(SOAK) -aim '$(SOAK_AIM)'

bench: all
	$(GO) test -run '^$$' -bench . -benchmem -count 5 ./... | tee build/bench.txt

clean:
	rm -rf bin build
