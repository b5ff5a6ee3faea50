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

# The race detector on the core packages (agent/..., snapshots/..., device/...);
# the simulator-, Appium- and binary-heavy rest without it (-race would
# multiply their time).
RACE_PKGS = ./agent/... ./snapshots/... ./device/...
test: setup
	go vet ./...
	go test -count=1 -race -timeout 20m $(RACE_PKGS)
	go test -count=1 -timeout 20m $$(go list ./... | grep -v -E "^$$(go list -m)/(agent|snapshots|device)(/|$$)")
	$(MAKE) fuzz

# Every go test -fuzz target, briefly.
fuzz:
	@set -e; for pkg in $$(go list ./...); do \
	  dir=$$(go list -f '{{.Dir}}' $$pkg); \
	  for f in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$dir/*_test.go 2>/dev/null | sed 's/^func //'); do \
	    echo "fuzz $$pkg $$f"; \
	    if ! out=$$(go test -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME) $$pkg 2>&1); then \
	      echo "$$out" | tail -15; \
	      echo "fuzz $$f failed; once more (a crasher it found is in testdata/fuzz now and fails again)"; \
	      go test -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME) $$pkg >/dev/null || exit 1; \
	    fi; \
	  done; done

# Side-by-side benchmarks, each pair in one run: the adb adapter vs the adb CLI
# (shell round trip, push); the outbox relay vs raw JetStream publishing and the
# per-step commit on the embedded store; the warm setup chain vs Appium alone.
bench: setup
	go test -run '^$$' -bench . -benchmem -benchtime 2s ./adb/
	go test -run '^$$' -bench . -benchmem -benchtime 1s ./snapshots/
	go test -run '^$$' -bench EngineOverhead -benchtime 200x ./cmd/...
	go test -run '^$$' -bench "WarmChain|AppiumAlone" -benchtime 5x ./cmd/...
	go test -run '^$$' -bench Daemon32 -benchtime 1x -timeout 20m ./cmd/screengraph-agent/
	go test -run '^$$' -bench FleetRunsPerMinute -benchtime 1x -timeout 10m ./cmd/screengraph-agent/
	go test -run '^$$' -bench Boot -benchtime 1x ./emulator/ ./nodes/
