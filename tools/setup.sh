#!/usr/bin/env bash
# Installs what the agent and its tests need on a fresh Debian machine, from the
# package registries only: adb, aapt, apksigner and postgresql (Debian), the real Appium 3
# server and appium-adb (npm, pinned in tools/node/package-lock.json), and the
# uiautomator2 driver into a project-local APPIUM_HOME. Re-running it is cheap.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
export APPIUM_HOME="$root/.cache/appium-home"

sudo_() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

# step LABEL CMD...: runs CMD with its output reduced to what shows progress
# (FILTER, an extended regexp; default: nothing), and a line every 10 s while
# it runs, so no phase of a fresh machine's setup is silent for long. On a
# failure the whole output is printed.
step() {
  local label=$1; shift
  local log; log=$(mktemp)
  local start=$SECONDS
  ( while sleep 10; do echo "setup: $label: still running ($((SECONDS - start)) s)"; done ) &
  local beat=$!
  set +e
  "$@" 2>&1 | tee "$log" | { grep --line-buffered -E "${FILTER:-a^}" || true; } | sed -u "s/^/setup: $label: /"
  local rc=${PIPESTATUS[0]}
  set -e
  kill "$beat" 2>/dev/null; wait "$beat" 2>/dev/null || true
  if [ "$rc" -ne 0 ]; then
    echo "setup: $label failed (exit $rc):" >&2; tail -40 "$log" >&2; rm -f "$log"; return "$rc"
  fi
  rm -f "$log"
  echo "setup: $label: done in $((SECONDS - start)) s"
}

need_apt=()
command -v adb >/dev/null || need_apt+=(adb)
command -v aapt >/dev/null || need_apt+=(aapt)
command -v apksigner >/dev/null || need_apt+=(apksigner zipalign)
command -v keytool >/dev/null || need_apt+=(default-jre-headless)
command -v node >/dev/null || need_apt+=(nodejs)
command -v npm >/dev/null || need_apt+=(npm)
# Postgres: the fleet store's tests start their own server from Debian's package.
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || need_apt+=(postgresql)
command -v runuser >/dev/null || need_apt+=(util-linux)
# NATS: the fleet tests start a 3-node JetStream cluster of Debian's nats-server (/usr/sbin).
command -v nats-server >/dev/null || [ -x /usr/sbin/nats-server ] || need_apt+=(nats-server)
# promtool (Debian's prometheus package) checks the daemon's /metrics in tests.
command -v promtool >/dev/null || need_apt+=(prometheus)
# make release-check: systemd-analyze verifies the deb's unit; file checks the static binary.
command -v systemd-analyze >/dev/null || need_apt+=(systemd)
command -v file >/dev/null || need_apt+=(file)
# The README's walkthrough reads JSON answers with jq.
command -v jq >/dev/null || need_apt+=(jq)
# The inspector's (/ui/) tests drive Debian's headless Chromium (chromedp).
command -v chromium >/dev/null || need_apt+=(chromium)
# The simulator's screenrecord encodes with ffmpeg; video tests read it back with ffprobe.
command -v ffmpeg >/dev/null || need_apt+=(ffmpeg)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: apt-get install ${need_apt[*]}"
  FILTER='^(Get:[0-9]+ |Setting up )' step "apt-get update" sudo_ apt-get update
  FILTER='^(Get:[0-9]+ |Setting up )' step "apt-get install" sudo_ env DEBIAN_FRONTEND=noninteractive apt-get install -y "${need_apt[@]}"
fi

if [ ! -x "$root/tools/node/node_modules/.bin/appium" ] || [ "$root/tools/node/package-lock.json" -nt "$root/tools/node/node_modules/.package-lock.json" ]; then
  echo "setup: npm ci (appium, appium-adb)"
  FILTER='^(added|npm (error|warn))' step "npm ci" bash -c "cd '$root/tools/node' && npm ci --no-audit --no-fund --loglevel=error"
fi
if [ ! -d "$APPIUM_HOME/node_modules/appium-uiautomator2-driver" ]; then
  echo "setup: appium driver install uiautomator2@8.7.0 (APPIUM_HOME=$APPIUM_HOME)"
  mkdir -p "$APPIUM_HOME"
  FILTER='(Installing|installed|Error)' step "appium driver install" "$root/tools/node/node_modules/.bin/appium" driver install uiautomator2@8.7.0
fi
echo "setup: ok (adb $(adb version | head -1 | awk '{print $5}'), appium $("$root/tools/node/node_modules/.bin/appium" --version), node $(node --version))"
