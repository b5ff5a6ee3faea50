#!/usr/bin/env bash
# The README's walkthrough, as one script (tools/release-check.sh runs it from
# the release archive, in an empty directory with a fresh HOME, with only the
# archive's binary on PATH and the Appium its `setup appium` installed). Needs:
# adb, curl, jq, screengraph-agent on PATH and an Appium it finds
# (`screengraph-agent setup appium`). Ports and paths from the environment,
# defaults in brackets:
#   ADB_PORT [5037]  API [127.0.0.1:7420]  NATS [127.0.0.1:4222]  DATA [./sg-data]
#   EXAMPLES [./examples]: run.json and policy-v2.yaml; when it has no run.json,
#     `screengraph-agent examples` writes them there with the demo APKs
#   APK [./fixtures/apks/demo-v2.apk in a checkout, else $EXAMPLES/demo-v2.apk]
set -euo pipefail
ADB_PORT=${ADB_PORT:-5037} API=${API:-127.0.0.1:7420} NATS=${NATS:-127.0.0.1:4222}
DATA=${DATA:-$PWD/sg-data} EXAMPLES=${EXAMPLES:-$PWD/examples}
[ -f "$EXAMPLES/run.json" ] || screengraph-agent examples "$EXAMPLES"
if [ -z "${APK:-}" ]; then
  APK=$PWD/fixtures/apks/demo-v2.apk
  [ -f "$APK" ] || APK=$EXAMPLES/demo-v2.apk
fi
export ANDROID_ADB_SERVER_PORT=$ADB_PORT SCREENGRAPH_SERVER=http://$API
SIM="" SERVE=""
# The clean-up keeps the walkthrough's exit code (a killed process's wait
# status would replace it under set -e).
trap 'rc=$?; set +e; kill $SERVE 2>/dev/null; wait $SERVE 2>/dev/null; screengraph-agent appium stop --data-dir "$DATA" >/dev/null
  kill $SIM 2>/dev/null; wait $SIM 2>/dev/null; exit $rc' EXIT

# 1. One simulated emulator on the adb server (it speaks the real device protocol).
adb start-server
screengraph-agent emulator sim --count 1 --port 5554 --adb-server "127.0.0.1:$ADB_PORT" >sim.log 2>&1 & SIM=$!
until adb devices | grep -q "emulator-5554[[:space:]]device"; do sleep 0.5; done
screengraph-agent devices --adb-server "127.0.0.1:$ADB_PORT"

# 2. Check the host (exit 1 on a fail).
screengraph-agent doctor --data-dir "$DATA" --adb-server "127.0.0.1:$ADB_PORT" --listen "$API" --nats-listen "$NATS"

# 3. The daemon, with a second policy version; APKs may be read from the APK's directory only.
screengraph-agent serve --data-dir "$DATA" --adb-server "127.0.0.1:$ADB_PORT" --listen "$API" --nats-listen "$NATS" \
  --policy "$EXAMPLES/policy-v2.yaml" --artifact-file-root "$(dirname "$APK")" >serve.log 2>&1 & SERVE=$!
# Wait until it is ready; if it exits first, show why and stop.
until curl -fs "http://$API/readyz" >/dev/null; do
  kill -0 "$SERVE" 2>/dev/null || { echo "serve exited:" >&2; tail -20 serve.log >&2; exit 1; }
  sleep 1
done; curl -fsS "http://$API/readyz"; echo

# 4. Submit examples/run.json with the APK's absolute path.
jq --arg apk "file://$APK" '.provisionApp.applicationUnderTestDescriptor.apkStorageObjectReference = $apk' \
  "$EXAMPLES/run.json" >run.json
RUN=$(curl -fsS -X POST "http://$API/v1/runs" -H 'Content-Type: application/json' --data-binary @run.json | jq -r .runId)
echo "run $RUN"

# 5. Follow its events until it ends (the CLI, then the same as Server-Sent Events).
screengraph-agent runs events "$RUN" --follow
curl -fsS -N "http://$API/v1/runs/$RUN/events?follow=1" | tail -3

# 6. The run and one step.
screengraph-agent runs show "$RUN"
screengraph-agent runs inspect "$RUN" --step 1

# 7. Pause a second run (on policy version 1) at its next node boundary, switch it to
#    policy version 2, resume it. A warm run takes about 2 s: when it ended before the
#    pause arrived, the pause is refused (409, run already ended) and the run is shown.
RUN2=$(jq '.policyVersion = 1' run.json | curl -fsS -X POST "http://$API/v1/runs" -H 'Content-Type: application/json' --data-binary @- | jq -r .runId)
SWITCHED=0
if screengraph-agent pause "$RUN2"; then
  until [[ "$(curl -fsS "http://$API/v1/runs/$RUN2" | jq -r .status)" =~ ^(PAUSED|FINISHED|FAILED)$ ]]; do sleep 0.5; done
  if [ "$(curl -fsS "http://$API/v1/runs/$RUN2" | jq -r .status)" = PAUSED ]; then
    screengraph-agent policy switch "$RUN2" --version 2
    screengraph-agent resume "$RUN2"
    SWITCHED=1
  fi
fi
screengraph-agent runs events "$RUN2" --follow | tail -3
curl -fsS "http://$API/v1/runs/$RUN2" | jq -r '"\(.runId) \(.status) policy \(.policyVersion)"'
if [ "$SWITCHED" = 1 ] && [ "$(curl -fsS "http://$API/v1/runs/$RUN2" | jq -r .policyVersion)" != 2 ]; then
  echo "run $RUN2 was switched to policy version 2 but says otherwise" >&2; exit 1
fi

# 8. Metrics.
curl -fsS "http://$API/metrics" | grep -E '^screengraph_runs'

# 9. The events on NATS (stream AGENT_EVENTS), with the nats CLI when installed.
if command -v nats >/dev/null; then
  nats --server "nats://$NATS" stream view AGENT_EVENTS --subject "agent.events.local.$RUN" | tail -5
fi
