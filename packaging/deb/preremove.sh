#!/bin/sh
# prerm (Debian policy 6.5): remove | upgrade <new version> |
# failed-upgrade <old version> | deconfigure in-favour ...
# Stops the daemon only when the package goes away; on an upgrade it keeps
# running on the old binary until postinst's try-restart, and its enabled
# state is never touched here (postrm disables on remove and purge).
set -e
case "$1" in
  remove|deconfigure)
    if [ -d "${DPKG_ROOT:-}/run/systemd/system" ]; then
      systemctl stop screengraph-agent.service >/dev/null 2>&1 || true
    fi
    ;;
  upgrade|failed-upgrade)
    ;;
  *)
    echo "prerm called with unknown argument '$1'" >&2
    exit 1
    ;;
esac
exit 0
