#!/usr/bin/env bash
# Runs the deb's maintainer scripts (CONTROL_DIR: `dpkg-deb -e` output) with
# the arguments dpkg passes them (deb-maintainer-scripts / Debian policy 6.5,
# 6.6) for an install, an upgrade, a remove and a purge, in a scratch
# DPKG_ROOT with a systemd runtime directory, and stub systemctl, chown,
# getent, adduser and addgroup on PATH that record their calls. Checks:
#   install  creates the state dir 0700 owned by the user; starts nothing
#   upgrade  try-restarts the unit; never stops or disables it
#   remove   stops and disables it; keeps the state dir
#   purge    disables it and deletes the state dir
# Exit 1 with the scenario and the recorded calls on the first failure.
set -euo pipefail
control="${1:?usage: deb-scripts-check.sh CONTROL_DIR}"
s="$(mktemp -d)"
trap 'rm -rf "$s"' EXIT
mkdir -p "$s/stub" "$s/root/run/systemd/system"
for cmd in systemctl chown adduser addgroup; do
  printf '#!/bin/sh\necho "%s $*" >>"%s/calls"\n' "$cmd" "$s" >"$s/stub/$cmd"
  chmod +x "$s/stub/$cmd"
done
# getent: the user and group exist after preinst's adduser.
printf '#!/bin/sh\ngrep -q "^adduser" "%s/calls" 2>/dev/null\n' "$s" >"$s/stub/getent"
chmod +x "$s/stub/getent"
state="$s/root/var/lib/screengraph-agent"
fail() { echo "deb-scripts-check: FAIL: $1; calls: $(tr '\n' ';' <"$s/calls" 2>/dev/null)" >&2; exit 1; }
run() { : >"$s/calls"; for step in "$@"; do
  # shellcheck disable=SC2086
  env -i PATH="$s/stub:/usr/bin:/bin" DPKG_ROOT="$s/root" sh -e "$control/${step%% *}" ${step#* } >/dev/null ||
    fail "$step exited non-zero"
done; }
has() { grep -qx -- "$1" "$s/calls"; }
lacks() { ! grep -q -- "$1" "$s/calls"; }

# install: preinst install; postinst configure (no old version)
run "preinst install" "postinst configure"
has "adduser --system --ingroup screengraph-agent --home /var/lib/screengraph-agent --no-create-home --gecos ScreenGraph device agent --shell /usr/sbin/nologin screengraph-agent" || fail "install: no system user"
[ -d "$state" ] && [ "$(stat -c %a "$state")" = 700 ] || fail "install: state dir not created 0700"
has "chown screengraph-agent:screengraph-agent $state" || fail "install: state dir not given to the user"
lacks "systemctl \(start\|restart\|try-restart\|enable\|stop\|disable\)" || fail "install: the unit was started, stopped, enabled or disabled"
touch "$state/agent.db"
# upgrade from 1.0.0 to 1.1.0: old prerm upgrade, new preinst upgrade, old postrm upgrade, new postinst configure
run "prerm upgrade 1.1.0" "preinst upgrade 1.0.0" "postrm upgrade 1.1.0" "postinst configure 1.0.0"
has "systemctl try-restart screengraph-agent.service" || fail "upgrade: the unit is not restarted"
lacks "systemctl \(stop\|disable\|start\)" || fail "upgrade: the unit was stopped, disabled or started"
[ -f "$state/agent.db" ] || fail "upgrade: the state was lost"
# remove: prerm remove, postrm remove
run "prerm remove" "postrm remove"
has "systemctl stop screengraph-agent.service" || fail "remove: the unit is not stopped"
has "systemctl disable screengraph-agent.service" || fail "remove: the unit is not disabled"
[ -f "$state/agent.db" ] || fail "remove: the state was deleted (only purge deletes it)"
# purge: postrm purge
run "postrm purge"
has "systemctl disable screengraph-agent.service" || fail "purge: the unit is not disabled"
[ ! -e "$state" ] || fail "purge: the state dir is still there"
# An argument dpkg never passes is an error, as policy asks.
for script in postinst prerm postrm; do
  ! env -i PATH="$s/stub:/usr/bin:/bin" DPKG_ROOT="$s/root" sh -e "$control/$script" bogus >/dev/null 2>&1 ||
    fail "$script accepted an unknown argument"
done
echo "deb-scripts-check: ok: install, upgrade, remove and purge call systemctl as Debian policy asks"
