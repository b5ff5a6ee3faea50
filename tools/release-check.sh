#!/usr/bin/env bash
# Checks what `make release-snapshot` put in dist/: SHA256SUMS matches every
# archive and package; the archives of RELEASE_TARGETS (default all four) hold
# a static binary; the linux/amd64
# archive's binary runs `version` from a directory outside the checkout with
# only it on PATH; the deb, unpacked into a scratch root (dpkg-deb -x), holds
# the binary, the systemd unit, the config and the maintainer scripts (run
# as dpkg runs them by tools/deb-scripts-check.sh), its binary runs `version`, and `systemd-analyze
# verify` accepts the unit in that root. Exit 1 on the first failure.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dist="${1:-$root/dist}"
fail() { echo "release-check: FAIL: $*" >&2; exit 1; }
ok() { echo "release-check: ok: $*"; }
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT

[ -f "$dist/SHA256SUMS" ] || fail "no $dist/SHA256SUMS (run make release-snapshot)"
# dist/ is of this commit (versions end in +<short commit>), unless VERSION
# was given to both.
want="${VERSION:-+$(git -C "$root" rev-parse --short HEAD)}"
grep -q -- "_[^ ]*${want}_" "$dist/SHA256SUMS" ||
  fail "$dist holds a release of another commit or version (want $want; run make release-snapshot): $(cut -d' ' -f3 "$dist/SHA256SUMS" | tr '\n' ' ')"
(cd "$dist" && sha256sum --strict -c SHA256SUMS >/dev/null) || fail "SHA256SUMS does not match the files"
targets="${RELEASE_TARGETS:-linux/amd64 linux/arm64 darwin/amd64 darwin/arm64}"
n=0
for t in $targets; do
  t=${t/\//_} n=$((n + 1))
  a=$(ls "$dist"/screengraph-agent_*_"$t".tar.gz 2>/dev/null | head -1 || true)
  [ -n "$a" ] || fail "no archive for $t"
  grep -q " $(basename "$a")\$" "$dist/SHA256SUMS" || fail "$(basename "$a") not in SHA256SUMS"
  # The listing first: grep -q exits at the first match, and tar writing into
  # the closed pipe would fail the pipeline under pipefail.
  list=$(tar -tzf "$a")
  grep -qx screengraph-agent <<<"$list" || fail "$a has no screengraph-agent binary"
  grep -qx LICENSE <<<"$list" || fail "$a has no LICENSE"
done
ok "SHA256SUMS matches; $n archives ($targets) with the binary and LICENSE"

# The archive's binary alone on PATH, run outside the checkout.
mkdir -p "$scratch/bin" "$scratch/outside"
tar -xzf "$(ls "$dist"/screengraph-agent_*_linux_amd64.tar.gz)" -C "$scratch/bin" screengraph-agent
grep -q "statically linked" <<<"$(file "$scratch/bin/screengraph-agent")" || fail "the linux/amd64 binary is not static: $(file "$scratch/bin/screengraph-agent")"
out=$(cd "$scratch/outside" && env -i HOME="$scratch/outside" PATH="$scratch/bin:/usr/bin:/bin" screengraph-agent version --output json --data-dir "$scratch/outside/data")
ver=$(echo "$out" | python3 -c 'import json,sys; v=json.load(sys.stdin); assert v["commit"] and v["buildDate"], v; print(v["version"])') ||
  fail "version of the archive's binary: $out"
ok "archive binary: version $ver (static), run outside the checkout"

# The deb, unpacked into a scratch root.
deb=$(ls "$dist"/screengraph-agent_*_amd64.deb 2>/dev/null | head -1 || true)
[ -n "$deb" ] || fail "no amd64 deb"
grep -q " $(basename "$deb")\$" "$dist/SHA256SUMS" || fail "$(basename "$deb") not in SHA256SUMS"
control=$(dpkg-deb --info "$deb" control) || fail "dpkg-deb cannot read the control of $deb"
grep -q '^Depends:.*adb' <<<"$control" || fail "deb does not depend on adb"
for field in 'Package: screengraph-agent' 'Architecture: amd64' "Version: ${deb##*/screengraph-agent_}"; do
  grep -qx "${field%_amd64.deb}" <<<"$control" || fail "deb control lacks '${field%_amd64.deb}': $control"
done
# Every directory the deb creates is root-owned 0755 (a 0700 staging root
# would make dpkg leave / unreadable to other users' lookups).
bad=$(dpkg-deb -c "$deb" | awk '$1 ~ /^d/ && ($1 != "drwxr-xr-x" || $2 != "root/root") {print $1, $2, $6}')
[ -z "$bad" ] || fail "deb directories not root 0755: $bad"
dpkg-deb -x "$deb" "$scratch/root"
dpkg-deb -e "$deb" "$scratch/control"
for f in usr/bin/screengraph-agent usr/lib/systemd/system/screengraph-agent.service etc/screengraph-agent/config.yaml \
  usr/share/doc/screengraph-agent/examples/run.json usr/share/doc/screengraph-agent/examples/walkthrough.sh; do
  [ -e "$scratch/root/$f" ] || fail "deb lacks /$f"
done
grep -q 'adduser --system' "$scratch/control/preinst" || fail "deb's preinst does not create the system user"
grep -q '/etc/screengraph-agent/config.yaml' "$scratch/control/conffiles" || fail "config.yaml is not a conffile"
"$root/tools/deb-scripts-check.sh" "$scratch/control" || fail "the deb's maintainer scripts"
grep -q "^screengraph-agent $ver" <<<"$("$scratch/root/usr/bin/screengraph-agent" version --data-dir "$scratch/data")" ||
  fail "the deb's binary: $("$scratch/root/usr/bin/screengraph-agent" version 2>&1 | head -3)"
# The config the deb ships is one serve reads (unknown keys are refused).
"$scratch/root/usr/bin/screengraph-agent" serve --config "$scratch/root/etc/screengraph-agent/config.yaml" \
  --data-dir "$scratch/data" --print-config >/dev/null || fail "serve does not read the deb's config.yaml"
unit=usr/lib/systemd/system/screengraph-agent.service
for opt in Type=notify NoNewPrivileges=yes ProtectSystem=strict StateDirectory=screengraph-agent User=screengraph-agent; do
  grep -qx "$opt" "$scratch/root/$unit" || fail "unit lacks $opt"
done
# verify checks that ExecStart's binary exists: point it at the unpacked one
# (--root would need a whole systemd tree in the scratch root).
sed "s|^ExecStart=/usr/bin/screengraph-agent|ExecStart=$scratch/root/usr/bin/screengraph-agent|" "$scratch/root/$unit" >"$scratch/screengraph-agent.service"
verify=$(systemd-analyze verify "$scratch/screengraph-agent.service" 2>&1) || fail "systemd-analyze verify: $verify"
[ -z "$verify" ] || fail "systemd-analyze verify warns: $verify"
ok "deb: $(basename "$deb") holds the binary (version $ver), unit (systemd-analyze verify clean), conffile, user-creating preinst"

# The README's walkthrough as a user with only the release archive follows
# it: an empty directory outside the checkout, a fresh HOME, PATH without the
# checkout (the archive's binary, the system's adb/node/npm/curl/jq), no
# APPIUM_HOME; `setup appium` installs Appium into the default data dir,
# the archive's examples/walkthrough.sh runs with --data-dir elsewhere and
# the inputs `screengraph-agent examples` writes.
w="$scratch/walk"
mkdir -p "$w/home" "$w/release"
tar -xzf "$(ls "$dist"/screengraph-agent_*_linux_amd64.tar.gz)" -C "$w/release"
[ -f "$w/release/examples/walkthrough.sh" ] && [ -f "$w/release/examples/run.json" ] || fail "the archive has no examples/"
userpath="$w/release:/usr/local/bin:/usr/bin:/bin"
# What a user's own environment has for reaching the npm registry (proxy, CA
# bundle) is kept; nothing else of this shell's is.
netenv=()
for v in NODE_EXTRA_CA_CERTS SSL_CERT_FILE SSL_CERT_DIR HTTP_PROXY HTTPS_PROXY NO_PROXY http_proxy https_proxy no_proxy \
  npm_config_registry npm_config_cafile; do
  [ -z "${!v:-}" ] || netenv+=("$v=${!v}")
done
read -r adb_port api_port nats_port < <(python3 -c 'import socket
s=[socket.socket() for _ in range(3)]
[x.bind(("127.0.0.1", 0)) for x in s]
print(*[x.getsockname()[1] for x in s])')
trap 'adb -P "$adb_port" kill-server >/dev/null 2>&1; rm -rf "$scratch"' EXIT
start=$(date +%s)
if ! (cd "$w" && env -i "${netenv[@]}" HOME="$w/home" PATH="$userpath" screengraph-agent setup appium >"$w/setup.log" 2>&1); then
  tail -30 "$w/setup.log" >&2; fail "setup appium with a fresh HOME"
fi
setup_s=$(( $(date +%s) - start ))
if ! (cd "$w" && env -i "${netenv[@]}" HOME="$w/home" PATH="$userpath" \
  ADB_PORT="$adb_port" API="127.0.0.1:$api_port" NATS="127.0.0.1:$nats_port" DATA="$w/sg-data" \
  EXAMPLES="$w/examples" bash "$w/release/examples/walkthrough.sh" >"$w/walkthrough.log" 2>&1); then
  tail -40 "$w/walkthrough.log" >&2; tail -20 "$w/serve.log" >&2 || true
  fail "the walkthrough with the archive alone"
fi
grep -q "FINISHED" "$w/walkthrough.log" || { tail -40 "$w/walkthrough.log" >&2; fail "the walkthrough's runs did not finish"; }
ok "walkthrough (setup appium ${setup_s} s with a fresh HOME; examples, doctor, serve --data-dir, run, events, inspect, pause/policy/resume, metrics) from the archive alone in $(( $(date +%s) - start )) s"
