package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/appium"
	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
)

// readLocalAppium reads the data dir's appium.json (zero value when absent).
func readLocalAppium(t testing.TB, dataDir string) appium.LocalState {
	t.Helper()
	var st appium.LocalState
	if b, err := os.ReadFile(appium.LocalStateFile(dataDir)); err == nil {
		json.Unmarshal(b, &st)
	}
	return st
}

// TestServeAppiumRestart: the daemon's local Appium server is SIGKILLed (its
// whole process group). The daemon notices, starts a new one on the same
// port, and the next run re-creates the uiautomator2 session the old server
// took with it (REUSE_OR_CREATE finds the stored session gone) and FINISHES.
func TestServeAppiumRestart(t *testing.T) {
	slow(t, "chains through a local Appium it kills and restarts")
	srv := simtest.StartADBServer(t)
	emu, _ := launchDefault(t, srv)
	d := startDaemon(t, srv)
	apk, _ := filepath.Abs(fixtureAPK("demo-v1.apk"))
	sha := signerDigest(t, apk)
	run := func() string {
		id := d.submit(t, runBody(emu.Serial(), "file://"+apk, sha, "INSTALL_IF_MISSING", "LAUNCH_OR_ATTACH", nil))
		d.waitStatus(t, []string{id}, 2*time.Minute, agent.RunFinished, agent.RunFailed, agent.RunCanceled)
		if st := d.run(t, id).Status; st != agent.RunFinished {
			t.Fatalf("run %s ended %s\n%s", id, st, d.log())
		}
		checkRunEvents(t, d.events(t, id), agent.KindRunFinished)
		return id
	}
	first := run()
	if again := run(); sessionOf(t, d.events(t, again)) != sessionOf(t, d.events(t, first)) {
		t.Fatalf("a warm run did not reuse the session: %s then %s", sessionOf(t, d.events(t, first)), sessionOf(t, d.events(t, again)))
	}
	old := readLocalAppium(t, d.dataDir)
	if old.PID <= 0 {
		t.Fatalf("no local Appium recorded in %s", appium.LocalStateFile(d.dataDir))
	}
	if err := syscall.Kill(-old.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	var now appium.LocalState
	for {
		now = readLocalAppium(t, d.dataDir)
		if now.PID > 0 && now.PID != old.PID {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the daemon did not restart its local Appium within 60 s\n%s", d.log())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if now.URL != old.URL {
		t.Fatalf("the new local Appium listens on %s, the daemon's driver on %s", now.URL, old.URL)
	}
	after := run()
	if sessionOf(t, d.events(t, after)) == sessionOf(t, d.events(t, first)) {
		t.Fatalf("after the restart the run reported session %q (before: %q), want a new one", sessionOf(t, d.events(t, after)), sessionOf(t, d.events(t, first)))
	}
}
