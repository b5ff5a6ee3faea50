package e2e

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/emulator/sim/android"
	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
)

// TestServeEvidenceOnFailure: through serve, an app that crashes at every
// launch fails the run with app_crashed and keeps the default onFailure
// evidence of LaunchOrAttach, its logcat holding the FATAL EXCEPTION block
// (from the crash buffer); an app that stops responding fails WaitIdle
// with app_not_responding and keeps its ANR traces.
func TestServeEvidenceOnFailure(t *testing.T) {
	slow(t, "chains through Appium to a failure's evidence")
	srv := simtest.StartADBServer(t)
	launch := func(edit func(*android.Profile)) string {
		prof := simtest.Profile(t, "default")
		edit(&prof)
		emu, _ := simtest.Launch(t, srv, prof)
		srv.WaitState(t, emu.Serial(), "device", 10*time.Second)
		return emu.Serial()
	}
	crashing := launch(func(p *android.Profile) {
		p.Faults.AppCrash = &android.AppCrashFault{Package: appPkg, Exception: "java.lang.IllegalStateException", Message: "evidence boom"}
	})
	hanging := launch(func(p *android.Profile) {
		p.Faults.AppNotResponding = &android.AppANRFault{Package: appPkg}
	})
	d := startDaemon(t, srv)
	apk, _ := filepath.Abs(fixtureAPK("demo-v1.apk"))
	sha := signerDigest(t, apk)
	crashRun := d.submit(t, runBody(crashing, "file://"+apk, sha, "", "", nil))
	anrBody := runBody(hanging, "file://"+apk, sha, "", "", nil)
	anrBody["launchOrAttach"].(map[string]any)["applicationUnderTestDescriptor"].(map[string]any)["androidLaunchActivityName"] = ".SpinnerActivity"
	anrRun := d.submit(t, anrBody)
	d.waitStatus(t, []string{crashRun, anrRun}, 4*time.Minute, agent.RunFinished, agent.RunFailed, agent.RunCanceled)

	byKind := func(id, node string) map[string][]byte {
		t.Helper()
		out := map[string][]byte{}
		for _, a := range d.artifactsOf(t, id) {
			if a.Node != node {
				t.Errorf("run %s: artifact %s of %s, want %s's", id, a.Kind, a.Node, node)
			}
			out[a.Kind] = d.artifactBytes(t, id, a)
		}
		return out
	}
	failure := func(id string) (string, string) {
		t.Helper()
		for _, e := range d.events(t, id) {
			if e.Kind == agent.KindRunFailed {
				var p agent.RunEndedPayload
				if err := json.Unmarshal(e.Payload, &p); err != nil || p.ErrorID == nil {
					t.Fatalf("run.failed %s: %v", e.Payload, err)
				}
				return string(*p.ErrorID), p.FailedNode
			}
		}
		t.Fatalf("run %s did not fail: %s", id, d.run(t, id).Status)
		return "", ""
	}

	if id, node := failure(crashRun); id != string(agent.ErrAppCrashed) || node != "LaunchOrAttach" {
		t.Fatalf("crash run failed with %s in %s", id, node)
	}
	ev := byKind(crashRun, "LaunchOrAttach")
	for _, k := range []string{agent.ArtifactScreenshot, agent.ArtifactUIHierarchy, agent.ArtifactLogcat} {
		if len(ev[k]) == 0 {
			t.Errorf("crash run: no %s artifact (have %d kinds)", k, len(ev))
		}
	}
	logcat := string(ev[agent.ArtifactLogcat])
	if !strings.Contains(logcat, "E AndroidRuntime: FATAL EXCEPTION: main") || !strings.Contains(logcat, "java.lang.IllegalStateException: evidence boom") {
		t.Errorf("crash run's logcat lacks the FATAL EXCEPTION block:\n%.3000s", logcat)
	}

	if id, node := failure(anrRun); id != string(agent.ErrAppNotResponding) || node != "WaitIdle" {
		t.Fatalf("ANR run failed with %s in %s", id, node)
	}
	ev = byKind(anrRun, "WaitIdle")
	if tr := string(ev[agent.ArtifactANRTraces]); !strings.Contains(tr, "data_app_anr") || !strings.Contains(tr, appPkg) {
		t.Errorf("ANR run's anr_traces: %.2000s", tr)
	}
	if len(ev[agent.ArtifactScreenshot]) == 0 || len(ev[agent.ArtifactLogcat]) == 0 {
		t.Errorf("ANR run kept %d kinds, want screenshot and logcat too", len(ev))
	}
}
