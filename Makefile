# The two commands of the README: `make demo` (the main job) and `make test`.
SHELL := /bin/bash
export APPIUM_HOME := $(CURDIR)/.cache/appium-home
export ANDROID_HOME := /usr/lib/android-sdk
BIN := bin/screengraph-agent
FUZZTIME ?= 5s

.PHONY: setup build demo test fuzz bench vet release-snapshot release-check

setup:
	@tools/setup.sh

build:
	@echo "build: go build -o $(BIN) ./cmd/screengraph-agent (a first build compiles ~300 packages: minutes; a line every 25 packages and every 10 s)"
	@start=$$(date +%s); ( while sleep 10; do echo "build: still compiling ($$(( $$(date +%s) - start )) s)"; done ) & beat=$$!; \
	  go build -v -o $(BIN) ./cmd/screengraph-agent 2>&1 | awk '/[ :#]/ {print; next} {n++; if (n % 25 == 0) printf "build: %d packages compiled (%s)\n", n, $$0; fflush()}'; \
	  rc=$${PIPESTATUS[0]}; kill $$beat 2>/dev/null; wait $$beat 2>/dev/null; \
	  test $$rc -eq 0 && echo "build: $(BIN) in $$(( $$(date +%s) - start )) s"

# The main job on a fresh machine: set up, then run it against the attached
# devices, starting simulated emulators when none is attached. Prints the time
# of each phase.
demo:
	@t0=$$(date +%s); $(MAKE) --no-print-directory setup && t1=$$(date +%s) && \
	  $(MAKE) --no-print-directory build && t2=$$(date +%s) && \
	  { tools/demo.sh; rc=$$?; t3=$$(date +%s); \
	    echo "demo: setup $$((t1 - t0)) s, build $$((t2 - t1)) s, demo $$((t3 - t2)) s (total $$((t3 - t0)) s)"; exit $$rc; }

# The race detector on the core packages (agent/..., snapshots/..., device/...);
# the simulator-, Appium- and binary-heavy rest without it (-race would
# multiply their time).
RACE_PKGS = ./agent/... ./snapshots/... ./device/...
test: setup
	go vet ./...
	go test -count=1 -race -timeout 20m $(RACE_PKGS)
	go test -count=1 -timeout 20m $$(go list ./... | grep -v -E "^$$(go list -m)/(agent|snapshots|device)(/|$$)")
	$(MAKE) fuzz

# Every go test -fuzz target, briefly (tools/fuzz.sh: a reproducer fails the
# run; Go's own fuzztime deadline race, golang/go#75804, is retried by count).
fuzz:
	@FUZZTIME=$(FUZZTIME) tools/fuzz.sh

# Side-by-side benchmarks, each pair in one run: the adb adapter vs the adb CLI
# (shell round trip, push); the outbox relay vs raw JetStream publishing and the
# per-step commit on the embedded store; the warm setup chain vs Appium alone.
bench: setup
	go test -run '^$$' -bench . -benchmem -benchtime 2s ./adb/
	go test -run '^$$' -bench . -benchmem -benchtime 1s ./snapshots/...
	go test -run '^$$' -bench ConcurrentPageSource -benchtime 300x ./appium/
	go test -run '^$$' -bench EngineOverhead -benchtime 200x ./cmd/...
	go test -run '^$$' -bench "WarmChain|AppiumAlone" -benchtime 5x ./cmd/...
	go test -run '^$$' -bench Daemon32 -benchtime 1x -timeout 20m ./cmd/internal/e2e/
	go test -run '^$$' -bench FleetRunsPerMinute -benchtime 1x -timeout 10m ./cmd/internal/e2e/
	go test -run '^$$' -bench FleetControlPlane -benchtime 1x -timeout 15m ./agent/service/
	go test -run '^$$' -bench Boot -benchtime 1x ./emulator/ ./nodes/
	go test -run '^$$' -bench LiveScreen32 -benchtime 1x -timeout 10m ./cmd/internal/e2e/
	go test -run '^$$' -bench Submit -benchtime 2000x ./nodes/
	go test -run '^$$' -bench Screenrecord -benchtime 1x ./emulator/sim/android/

# Release packaging (tools/release.sh): archives for linux/darwin x amd64/arm64,
# debs with a systemd unit (Debian's dpkg-deb: no tool to install; see
# docs/decisions.md for why not nfpm or goreleaser), SHA256SUMS, into dist/.
release-snapshot:
	@tools/release.sh

# Checks what release-snapshot put in dist/ (it builds nothing; a dist/ of
# another commit is refused): checksums, archives, the deb unpacked into a
# scratch root, its maintainer scripts and systemd unit, and the README
# walkthrough from the archive alone (tools/release-check.sh). .ci/run calls
# both with RELEASE_TARGETS=linux/amd64 (each cross build compiles every
# package again).
release-check: setup
	@tools/release-check.sh dist
