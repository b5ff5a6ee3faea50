#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then
  systemctl daemon-reload >/dev/null 2>&1 || true
fi
echo "screengraph-agent: start it with 'systemctl enable --now screengraph-agent'; install Appium for it with 'sudo -u screengraph-agent HOME=/var/lib/screengraph-agent screengraph-agent setup appium --data-dir /var/lib/screengraph-agent'"
