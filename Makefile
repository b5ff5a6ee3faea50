# The two commands of the README: `make demo` (the main job) and `make test`.
SHELL := /bin/bash
export APPIUM_HOME := $(CURDIR)/.cache/appium-home
export ANDROID_HOME := /usr/lib/android-sdk
BIN := bin/screengraph-agent
FUZZTIME ?= 5s

.PHONY: setup build demo test fuzz bench vet

setup:
	@tools/setup.sh

build:
	go build -o $(BIN) ./cmd/screengraph-agent

# The main job on a fresh machine: set up, then run it against the attached
# devices, starting simulated emulators when none is attached.
demo: setup build
	@tools/demo.sh

test: setup
	go vet ./...
	go test -count=1 -timeout 20m ./...
	$(MAKE) fuzz

# Every go test -fuzz target, briefly.
fuzz:
	@set -e; for pkg in $$(go list ./...); do \
	  dir=$$(go list -f '{{.Dir}}' $$pkg); \
	  for f in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$dir/*_test.go 2>/dev/null | sed 's/^func //'); do \
	    echo "fuzz $$pkg $$f"; go test -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME) $$pkg >/dev/null || exit 1; \
	  done; done

# Side-by-side benchmarks: ours vs the adb CLI.
bench: setup
	go test -run '^$$' -bench . -benchmem -benchtime 2s ./adb/ ./emulator/...
