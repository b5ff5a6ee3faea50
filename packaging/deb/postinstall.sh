#!/bin/sh
# postinst (Debian policy 6.5, 9.3.3): configure [<old version>] |
# abort-upgrade|abort-remove|abort-deconfigure <version>.
# - The state directory exists and belongs to the daemon's user from the
#   first install on, so `setup appium --data-dir /var/lib/screengraph-agent`
#   works before the first `systemctl start` (the unit's StateDirectory= would
#   create it only then). 0700 as the unit's StateDirectoryMode.
# - A new install is not enabled or started: the daemon needs Appium first
#   (the message says how). An upgrade restarts the daemon only if it was
#   running (try-restart) and leaves enabled/disabled as the admin set it.
# DPKG_ROOT is dpkg's root for chrootless installs ("" normally).
set -e
unit=screengraph-agent.service
state="${DPKG_ROOT:-}/var/lib/screengraph-agent"
case "$1" in
  configure|abort-upgrade|abort-remove|abort-deconfigure)
    if [ ! -d "$state" ]; then
      mkdir -p "$state"
      chmod 0700 "$state"
      chown screengraph-agent:screengraph-agent "$state"
    fi
    if [ -d "${DPKG_ROOT:-}/run/systemd/system" ]; then
      systemctl --system daemon-reload >/dev/null || true
      if [ -n "$2" ]; then
        systemctl try-restart "$unit" >/dev/null || true
      fi
    fi
    if [ "$1" = configure ] && [ -z "$2" ]; then
      echo "screengraph-agent: install Appium for it with 'sudo -u screengraph-agent HOME=/var/lib/screengraph-agent screengraph-agent setup appium --data-dir /var/lib/screengraph-agent', then start it with 'sudo systemctl enable --now screengraph-agent'"
    fi
    ;;
  *)
    echo "postinst called with unknown argument '$1'" >&2
    exit 1
    ;;
esac
exit 0
