#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then
  systemctl stop screengraph-agent >/dev/null 2>&1 || true
  systemctl disable screengraph-agent >/dev/null 2>&1 || true
fi
