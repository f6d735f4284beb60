# toolmux — build, test and run.
#
#   make serve   run the MCP gateway on the built-in tools of this directory
#   make test    install the npm test peers and Debian's chromium (for the
#                browser tests), then vet, run every test with -race, and run
#                each fuzz target briefly
#   make bench   run the benchmarks recorded in BENCHMARKS.md

GO      ?= go
NPM     ?= npm
PEERS   := testdata/npm
STAMP   := $(PEERS)/node_modules/.installed

.PHONY: all build serve test check peers browser fuzz bench clean

# Fuzz targets (package:target), each run briefly by `make test`; their
# corpora are committed under the packages' testdata/fuzz.
FUZZ := ./config:FuzzParse ./builtin:FuzzResolvePath ./internal/ringbuf:FuzzRingBuffer \
        ./pipeline:FuzzRepair ./pipeline:FuzzCanonicalURL ./pipeline:FuzzFingerprint \
        ./cmdsource:FuzzDeclarations ./policy:FuzzAnswer ./policy:FuzzArgs \
        ./web:FuzzHTMLToMarkdown ./web:FuzzSearXNGResponse ./web:FuzzSerperResponse \
        ./stream:FuzzSSE ./internal/bm25:FuzzTerms ./internal/jsonrepair:FuzzRepair ./agent:FuzzParseTextCalls ./llm:FuzzOpenAIStream \
        ./internal/jsonscan:FuzzScan ./internal/mcpwire:FuzzReadRequest ./mcpsource:FuzzDecodeAnswer ./tasklog:FuzzScan \
        ./stream:FuzzAppendJSON ./internal/toolglob:FuzzPattern ./internal/editdist:FuzzDistance \
        ./internal/jsonfloat:FuzzAppend
FUZZTIME ?= 5s

all: build

build:
	$(GO) build -o bin/toolmux ./cmd/toolmux

serve:
	$(GO) run ./cmd/toolmux serve

# The real MCP servers the tests run against, pinned by package-lock.json.
peers: $(STAMP)

$(STAMP): $(PEERS)/package.json $(PEERS)/package-lock.json
	cd $(PEERS) && $(NPM) ci --no-audit --no-fund --loglevel=error
	touch $@

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
# broken install cannot pass silently.
test: peers browser check
	TOOLMUX_REQUIRE_PEERS=1 $(GO) test -race -count=1 ./...
	$(GO) test -count=1 -run 'Allocat' ./policy
	$(MAKE) fuzz

# A run that fails without writing a failing input is Go's fuzzing harness
# missing its own deadline on a busy machine ("context deadline exceeded"),
# not a finding: that target is run once more. A real finding always writes
# its input under testdata/fuzz and fails the build.
fuzz:
	@for t in $(FUZZ); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "fuzz $$pkg $$name ($(FUZZTIME))"; \
		out=$$($(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) $$pkg 2>&1); st=$$?; echo "$$out"; \
		if [ $$st -ne 0 ]; then \
			if echo "$$out" | grep -q "Failing input written"; then exit 1; fi; \
			echo "fuzz $$pkg $$name: the harness failed without a finding; running it again"; \
			$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
		fi; \
	done

bench: peers
	$(GO) test -run '^$$' -bench . -benchmem ./...

clean:
	rm -rf bin $(PEERS)/node_modules
