#!/usr/bin/env bash
# The main job: the daemon. Starts `screengraph-agent serve` on this host's adb
# server (with two simulated emulators when fewer than two devices are
# attached), submits setup runs over HTTP on two devices (a cold round, then a
# warm one), follows their events live and prints how long each took.
# Overrides: ANDROID_ADB_SERVER_PORT, SCREENGRAPH_LISTEN (127.0.0.1:7420),
# SCREENGRAPH_NATS_LISTEN (127.0.0.1:4222), SCREENGRAPH_DATA_DIR,
# SCREENGRAPH_EMULATOR_PORT (5554: the first simulated emulator's console
# port), DEMO_KEEP (1 keeps the daemon up after the runs, with the inspector's
# URL printed, until Enter or Ctrl-C; 0 stops at once; default: 1 when
# standard input is a terminal). Everything it started (the simulated
# emulators, serve, its Appium, and the adb server when none was running)
# is stopped at the end.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
bin="$root/bin/screengraph-agent"
port="${ANDROID_ADB_SERVER_PORT:-5037}"
adbs="127.0.0.1:$port"
listen="${SCREENGRAPH_LISTEN:-127.0.0.1:7420}"
nats_listen="${SCREENGRAPH_NATS_LISTEN:-127.0.0.1:4222}"
data="${SCREENGRAPH_DATA_DIR:-$root/.cache/demo-data}"
emu_port="${SCREENGRAPH_EMULATOR_PORT:-5554}"
keep="${DEMO_KEEP:-$([ -t 0 ] && echo 1 || echo 0)}"
# Lines of the followers are cut to the terminal's width, so that two of
# them writing at once never interleave mid-line (a short line is one write).
cols=200
if [ -t 1 ]; then cols=$(tput cols 2>/dev/null || echo "${COLUMNS:-200}"); fi
api="http://$listen"
apk="$root/fixtures/apks/demo-v2.apk"

# An adb server already running (the user's) is left running; one this
# demo starts is stopped at the end.
own_adb=0
(exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || own_adb=1
adb -P "$port" start-server >/dev/null
sim="" serve="" followers=()
cleanup() {
  for f in "${followers[@]}"; do kill "$f" 2>/dev/null || true; done
  [ -n "$serve" ] && kill -TERM "$serve" 2>/dev/null && wait "$serve" 2>/dev/null || true
  "$bin" appium stop --data-dir "$data" >/dev/null 2>&1 || true
  [ -n "$sim" ] && kill "$sim" 2>/dev/null && wait "$sim" 2>/dev/null || true
  if [ "$own_adb" = 1 ]; then adb -P "$port" kill-server >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT

ready_devices() { adb -P "$port" devices | awk 'NR>1 && $2=="device" {print $1}'; }
if [ "$(ready_devices | wc -l)" -lt 2 ]; then
  echo "demo: fewer than two devices on the adb server at $adbs: starting two simulated emulators"
  "$bin" emulator sim --count 2 --port "$emu_port" --adb-server "$adbs" >"$data.sim.log" 2>&1 &
  sim=$!
  for _ in $(seq 50); do [ "$(ready_devices | wc -l)" -ge 2 ] && break; sleep 0.2; done
fi
mapfile -t serials < <(ready_devices | head -2)
if [ "${#serials[@]}" -ne 2 ]; then
  echo "demo: need two devices; the adb server at $adbs has ${#serials[@]} ready" >&2
  # Why the simulated emulators did not come up (a port in use, say).
  [ -s "$data.sim.log" ] && sed 's/^/demo: sim: /' "$data.sim.log" | tail -5 >&2
  exit 1
fi

mkdir -p "$data"
echo "demo: screengraph-agent serve --data-dir $data --listen $listen --nats-listen $nats_listen --adb-server $adbs"
"$bin" serve --data-dir "$data" --listen "$listen" --nats-listen "$nats_listen" --adb-server "$adbs" \
  --artifact-file-root "$(dirname "$apk")" >"$data/serve.log" 2>&1 &
serve=$!
for _ in $(seq 300); do
  curl -fsS "$api/readyz" >/dev/null 2>&1 && break
  kill -0 "$serve" 2>/dev/null || { cat "$data/serve.log" >&2; exit 1; }
  sleep 0.1
done
curl -fsS "$api/readyz"; echo
echo "demo: the run inspector (web page) is at $api/ui/ while the demo runs"
"$bin" devices --adb-server "$adbs"

# The expected signer: the demo APK's certificate SHA-256, as apksigner prints it.
sha=$(apksigner verify --print-certs "$apk" | awk '/certificate SHA-256 digest/ {print $NF; exit}')
request() {
  cat <<JSON
{"ensureDevice": {"deviceConfiguration": {"platformName": "android", "deviceName": "$1"}},
 "provisionApp": {"applicationUnderTestDescriptor": {"androidPackageId": "com.example.app",
   "apkStorageObjectReference": "file://$apk", "expectedBuildSignatureSha256": "$sha"}},
 "launchOrAttach": {"applicationUnderTestDescriptor": {"androidPackageId": "com.example.app"}},
 "waitIdle": {"idleHeuristicsConfiguration": {}}}
JSON
}
for round in cold warm; do
  echo
  echo "demo: $round round: POST $api/v1/runs on ${serials[*]}"
  ids=()
  for s in "${serials[@]}"; do
    id=$(request "$s" | curl -fsS -X POST "$api/v1/runs" -H 'Content-Type: application/json' --data-binary @- |
      sed -n 's/.*"runId":"\([^"]*\)".*/\1/p')
    echo "  $s -> run $id"
    ids+=("$id")
  done
  # Follow each run's events live (Server-Sent Events through the CLI).
  followers=()
  for id in "${ids[@]}"; do
    "$bin" runs events "$id" --follow --server "$api" | sed -u -E "s/^/  [${id: -6}] /; s/^(.{$((cols - 1))}).+\$/\1…/" &
    followers+=($!)
  done
  for f in "${followers[@]}"; do wait "$f" || true; done
  followers=()
  for id in "${ids[@]}"; do
    curl -fsS "$api/v1/runs/$id" | python3 -c '
import json, sys
r = json.load(sys.stdin)
nodes = ", ".join("%s %d ms" % (n["node"], n["durationMillis"]) for n in r["nodes"])
print("  run %s on %s: %s in %d ms (%s)" % (r["runId"], r["serial"], r["status"], r.get("tookMillis", 0), nodes))'
  done
done
echo
echo "demo: the same from the CLI: screengraph-agent runs list --server $api"
"$bin" runs list --server "$api" --limit 4
echo "demo: events went to NATS at nats://$nats_listen, stream AGENT_EVENTS, subjects agent.events.<tenant>.<run>"
curl -fsS "$api/metrics" | grep -E '^screengraph_(runs|leases_held|devices)' || true
if [ "$keep" = 1 ]; then
  echo
  echo "demo: the daemon is still up: open $api/ui/ (the run inspector). Press Enter or Ctrl-C to stop it."
  read -r _ || true
fi
