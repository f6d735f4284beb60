# toolmux — build, test and run.
#
#   make build   build bin/toolmux, and bin/toolmux-codemode (code mode's
#                engine), with release flags (see BUILDFLAGS)
#   make serve   build bin/toolmux and run the MCP gateway on the built-in
#                tools of this directory
#   make test    install the npm test peers and Debian's chromium (for the
#                browser tests), build ORY Hydra (the identity tests' IdP),
#                then vet, run every test with -race, and run
#                each fuzz target briefly
#   make bench   run the benchmarks recorded in BENCHMARKS.md

GO      ?= go
NPM     ?= npm
PEERS   := testdata/npm
STAMP   := $(PEERS)/node_modules/.installed

.PHONY: all build serve test check peers browser idp fuzz bench clean

# Fuzz targets (package:target), each run briefly by `make test`; their
# corpora are committed under the packages' testdata/fuzz. make fuzz fails
# when a fuzz test of the module is missing from this list.
FUZZ := ./config:FuzzParse ./builtin:FuzzResolvePath ./internal/ringbuf:FuzzRingBuffer \
        ./pipeline:FuzzRepair ./pipeline:FuzzCanonicalURL ./pipeline:FuzzFingerprint ./pipeline:FuzzPIIDetect \
        ./cmdsource:FuzzDeclarations ./policy:FuzzAnswer ./policy:FuzzArgs \
        ./web:FuzzHTMLToMarkdown ./web:FuzzSearXNGResponse ./web:FuzzSerperResponse \
        ./stream:FuzzSSE ./internal/bm25:FuzzTerms ./internal/jsonrepair:FuzzRepair ./agent:FuzzParseTextCalls ./llm:FuzzOpenAIStream \
        ./internal/jsonscan:FuzzScan ./internal/jsonscan:FuzzMembers ./internal/mcpwire:FuzzReadRequest ./internal/mcpwire:FuzzReadMeta ./mcpsource:FuzzDecodeAnswer ./tasklog:FuzzScan \
        ./stream:FuzzAppendJSON ./internal/toolglob:FuzzPattern ./internal/editdist:FuzzDistance \
        ./internal/jsonfloat:FuzzAppend ./fleet:FuzzReadRequests ./gateway:FuzzNewEra ./mcpsource:FuzzTaskSSE ./gateway:FuzzOpenState \
        ./gateway:FuzzBearerToken ./identity:FuzzJWT ./identity:FuzzClaims ./gateway:FuzzLoginCookie ./gateway:FuzzPageSession \
        ./identity:FuzzKeyStoreFile ./vault:FuzzOpen ./vault:FuzzFileStoreFile ./gateway:FuzzWithState \
        ./tasklog:FuzzCallRecord ./internal/jsonenc:FuzzAppendString ./gateway:FuzzReadModernCall ./gateway:FuzzReadModernMeta ./gateway:FuzzLeanBare \
        ./openapisource:FuzzBuildRequest
FUZZTIME ?= 5s
# Fuzz targets run this many at a time, sharing the cores (scripts/fuzz.sh).
FUZZJOBS ?= 4
# Each package's fuzz-instrumented test binary is compiled once: the one
# with the most dependencies alone, then this many at a time (scripts/fuzz.sh).
FUZZBUILDJOBS ?= 2
# Every fuzz test of these packages must be in FUZZ (empty: no check, to
# fuzz a few targets: make fuzz FUZZ=./config:FuzzParse FUZZALL=).
FUZZALL ?= ./...
# Tests that call t.Parallel (cmd/toolmux's, which mostly wait on the
# processes they start) run this many at a time in a package.
PARALLEL ?= 4

# Release flags: -trimpath keeps the builder's paths out of the binary; -s -w
# leave out the symbol table and the DWARF debug information (panics still
# print their stack traces, which come from the runtime's own tables). The
# version is left to the build info, as `toolmux version` reads it.
#
# The grpcnotrace tag (grpc-go's) keeps golang.org/x/net/trace out: gRPC comes
# with the OTLP exporters, and x/net/trace's debug pages use text/template,
# whose reflective method calls turn the linker's dead code elimination off
# for the whole program; with the tag the binary is a fifth smaller. Nothing
# of toolmux uses those pages. TAGS adds tags (TAGS="grpcnotrace
# toolmux_pprof" for a profiling build).
TAGS       ?= grpcnotrace
BUILDFLAGS := -trimpath -tags='$(TAGS)' -ldflags='-s -w'

all: build

# Not a file target: go build knows what changed, and a build with nothing to
# do takes a second. The line printed first is for the first build, which
# compiles every dependency and would otherwise look like a hang.
build:
	@echo "building bin/toolmux and bin/toolmux-codemode (a first build compiles every dependency: a few minutes)..."
	$(GO) build $(BUILDFLAGS) -o bin/ ./cmd/toolmux ./cmd/toolmux-codemode

serve: build
	bin/toolmux serve

# The real MCP servers the tests run against, pinned by package-lock.json.
peers: $(STAMP)

$(STAMP): $(PEERS)/package.json $(PEERS)/package-lock.json
	cd $(PEERS) && $(NPM) ci --no-audit --no-fund --loglevel=error
	touch $@

# The identity provider the identity tests run against: ORY Hydra, built
# from its module on the Go module proxy into the user's cache directory
# (internal/testservers/hydra.go); a second run finds it there.
idp:
	$(GO) run ./internal/testservers/buildhydra

# The browser the web UI's tests drive (chromedp): Debian's chromium. Test
# tools may not download a browser of their own.
CHROMIUM ?= /usr/bin/chromium

browser:
	@if [ ! -x "$(CHROMIUM)" ]; then \
		echo "installing Debian's chromium for the browser tests"; \
		sudo=; [ "$$(id -u)" = 0 ] || sudo=sudo; \
		export DEBIAN_FRONTEND=noninteractive; \
		$$sudo apt-get install -y -qq chromium >/dev/null 2>&1 || \
		{ $$sudo apt-get update -qq && $$sudo apt-get install -y -qq chromium >/dev/null; } || \
		{ echo "could not install chromium (apt-get install chromium)"; exit 1; }; \
	fi

check:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './testdata/*')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...

# TOOLMUX_REQUIRE_PEERS turns "peer not installed" skips into failures, so a
# broken install cannot pass silently. Each go test runs under testreport
# (internal/cmd/testreport): it prints go test's output as without -json,
# then the tests that were skipped, and fails when one is not on its
# allow-list (benchmarks only), as when a test fails: make test runs every
# test it names (docs/operations.md, "The test suite").
TESTREPORT := bin/testreport
test: peers browser idp check
	$(GO) build -o $(TESTREPORT) ./internal/cmd/testreport
	TOOLMUX_REQUIRE_PEERS=1 $(TESTREPORT) $(GO) test -json -race -count=1 -timeout 20m -parallel $(PARALLEL) ./...
	# without -race: allocation counts (policy/norace_test.go)
	$(TESTREPORT) $(GO) test -json -count=1 -run 'Allocat' ./policy
	$(MAKE) fuzz

# Each package's fuzz-instrumented test binary built once (FUZZBUILDJOBS at a
# time, after the largest), then its targets run with it, FUZZJOBS at a
# time, sharing the cores (scripts/fuzz.sh); a failing input found is written
# under the package's testdata/fuzz and fails the build, and so does a fuzz
# test of FUZZALL's packages missing from FUZZ.
fuzz:
	@GO="$(GO)" FUZZTIME=$(FUZZTIME) JOBS=$(FUZZJOBS) BUILDJOBS=$(FUZZBUILDJOBS) ALL='$(FUZZALL)' scripts/fuzz.sh $(FUZZ)

bench: peers
	$(GO) test -run '^$$' -bench . -benchmem ./...

clean:
	rm -rf bin $(PEERS)/node_modules
