#!/bin/sh
# postrm (Debian policy 6.5): remove | purge | upgrade <new version> |
# failed-upgrade | abort-install | abort-upgrade | disappear.
# remove: the unit file is gone, so systemd forgets it (disable drops the
# wants/ link an `enable` made); purge also deletes the daemon's state
# (store, artifacts, its Appium install). The system user stays (policy
# 9.2.2: a user may still own files elsewhere). Upgrades change nothing.
set -e
state="${DPKG_ROOT:-}/var/lib/screengraph-agent"
case "$1" in
  remove|purge)
    if command -v systemctl >/dev/null 2>&1; then
      systemctl disable screengraph-agent.service >/dev/null 2>&1 || true
      if [ -d "${DPKG_ROOT:-}/run/systemd/system" ]; then
        systemctl --system daemon-reload >/dev/null || true
      fi
    fi
    if [ "$1" = purge ]; then
      rm -rf "$state"
    fi
    ;;
  upgrade|failed-upgrade|abort-install|abort-upgrade|disappear)
    ;;
  *)
    echo "postrm called with unknown argument '$1'" >&2
    exit 1
    ;;
esac
exit 0
