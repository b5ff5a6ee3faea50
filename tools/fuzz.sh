#!/usr/bin/env bash
# Runs every go test -fuzz target of the module briefly (make fuzz).
#
# FUZZTIME (default 5s) is each target's budget. A target fails the run when
# its seeds fail, when it writes a reproducer into testdata/fuzz/<target>, or
# when it fails for any other reason twice.
#
# One failure is not ours: Go's fuzz coordinator (go1.26; golang/go#75804,
# fixed in go1.27) can end a duration budget with a bare "context deadline
# exceeded" and no input, when the deadline fires while a worker is mid-call
# (seen in CI on FuzzParseBootStatus, twice in a row under load). Such a
# failure is retried with a count budget (as many executions as the failed run
# reported, at least 100), which has no deadline to race; that retry must pass.
set -euo pipefail

FUZZTIME=${FUZZTIME:-5s}

listing() { # the reproducers a target has: its corpus files, sorted
  if [ -d "$1" ]; then (cd "$1" && ls -1 | LC_ALL=C sort); fi
}

# deadline_only OUTPUT: the run failed only through the coordinator's deadline,
# i.e. a bare "context deadline exceeded" under the target's FAIL line and no
# input written.
deadline_only() {
  grep -q '^    context deadline exceeded$' <<<"$1" &&
    ! grep -q -e 'Failing input written' -e '^    --- FAIL' -e 'panic:' <<<"$1"
}

ran=0 retried=0
for pkg in $(go list ./...); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  for f in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //'); do
    echo "fuzz $pkg $f"
    ran=$((ran + 1))
    corpus=$dir/testdata/fuzz/$f
    before=$(listing "$corpus")
    if out=$(go test -run '^$' -fuzz "^$f\$" -fuzztime "$FUZZTIME" "$pkg" 2>&1); then
      continue
    fi
    echo "$out" | tail -15
    written=$(comm -13 <(echo "$before") <(listing "$corpus"))
    if [ -n "$written" ]; then
      echo "fuzz $f found a failing input: $corpus/$written (commit it as a seed once fixed)"
      exit 1
    fi
    if ! deadline_only "$out"; then
      echo "fuzz $f failed"
      exit 1
    fi
    retried=$((retried + 1))
    # The failed run's own pace sets the count: a SQLite-backed target runs
    # ~20/s, a parser ~5000/s.
    count=$(grep -o 'execs: [0-9]*' <<<"$out" | tail -1 | grep -o '[0-9]*' || true)
    if [ -z "$count" ] || [ "$count" -lt 100 ]; then count=100; fi
    echo "fuzz $f: \"context deadline exceeded\" with no input written (Go's fuzz coordinator, golang/go#75804); once more with a count budget of ${count}x"
    if ! out=$(go test -run '^$' -fuzz "^$f\$" -fuzztime "${count}x" "$pkg" 2>&1); then
      echo "$out" | tail -15
      echo "fuzz $f failed with a count budget too"
      exit 1
    fi
  done
done
echo "fuzz: $ran targets passed ($retried retried after the coordinator's deadline race)"
