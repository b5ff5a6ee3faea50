#!/usr/bin/env bash
# The main job: list the devices of this host's adb server; when none is
# attached, start two simulated emulators (one of them booting slowly) so there
# is something real to drive, and show what the agent sees of them.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="$root/bin/screengraph-agent"
port="${ANDROID_ADB_SERVER_PORT:-5037}"

adb -P "$port" start-server >/dev/null
sims=()
cleanup() { for p in "${sims[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

if ! adb -P "$port" devices | awk 'NR>1 && $2!=""' | grep -q .; then
  echo "demo: no device attached to the adb server on port $port: starting simulated emulators"
  "$bin" emulator sim --count 1 --port 5554 --adb-server "127.0.0.1:$port" &
  sims+=($!)
  "$bin" emulator sim --count 1 --port 5556 --profile slow-boot --adb-server "127.0.0.1:$port" &
  sims+=($!)
  for _ in $(seq 50); do
    [ "$(adb -P "$port" devices | grep -c emulator-555)" -ge 2 ] && break
    sleep 0.2
  done
fi
echo "demo: screengraph-agent devices"
"$bin" devices --adb-server "127.0.0.1:$port"
echo "demo: screengraph-agent devices --output json"
"$bin" devices --adb-server "127.0.0.1:$port" --output json
