#!/bin/sh
# The daemon's system user; the StateDirectory of its unit is owned by it.
set -e
if ! getent group screengraph-agent >/dev/null; then
  addgroup --system screengraph-agent
fi
if ! getent passwd screengraph-agent >/dev/null; then
  adduser --system --ingroup screengraph-agent --home /var/lib/screengraph-agent \
    --no-create-home --gecos "ScreenGraph device agent" --shell /usr/sbin/nologin screengraph-agent
fi
