#!/usr/bin/env bash
# The main job: run the ScreenGraph setup chain (EnsureDevice -> ProvisionApp ->
# LaunchOrAttach -> WaitIdle) twice on the embedded default store, installing
# the signed demo APK. It uses the first device attached to this host's adb
# server; when none is attached it starts a simulated emulator first. The
# second run shows the warm path: session reused, install skipped (SAME, MATCHED).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="$root/bin/screengraph-agent"
port="${ANDROID_ADB_SERVER_PORT:-5037}"
adbs="127.0.0.1:$port"
apk="$root/fixtures/apks/demo-v2.apk"

adb -P "$port" start-server >/dev/null
sim=""
cleanup() {
  "$bin" appium stop >/dev/null 2>&1 || true
  [ -n "$sim" ] && kill "$sim" 2>/dev/null && wait "$sim" 2>/dev/null || true
}
trap cleanup EXIT

serial=$(adb -P "$port" devices | awk 'NR>1 && $2=="device" {print $1; exit}')
if [ -z "$serial" ]; then
  echo "demo: no device attached to the adb server on port $port: starting a simulated emulator"
  "$bin" emulator sim --port 5554 --adb-server "$adbs" &
  sim=$!
  for _ in $(seq 50); do
    serial=$(adb -P "$port" devices | awk 'NR>1 && $2=="device" {print $1; exit}')
    [ -n "$serial" ] && break
    sleep 0.2
  done
  [ -n "$serial" ] || { echo "demo: the simulated emulator did not come up" >&2; exit 1; }
fi
"$bin" devices --adb-server "$adbs"

# The expected signer: the demo APK's certificate SHA-256, as apksigner prints it.
sha=$(apksigner verify --print-certs "$apk" | awk '/certificate SHA-256 digest/ {print $NF; exit}')
for i in 1 2; do
  echo
  echo "demo: run $i: screengraph-agent run --serial $serial --package com.example.app --apk $apk --sha256 $sha"
  "$bin" run --adb-server "$adbs" --serial "$serial" --package com.example.app --apk "$apk" --sha256 "$sha"
done
echo
"$bin" runs list --limit 2
