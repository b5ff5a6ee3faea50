package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/appium"
	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
	"github.com/screengraph/screengraph-agent/nodes"
)

// TestChainUnauthorizedDevice: a device whose RSA prompt is not accepted yet
// (the simulator answers the host's CNXN with AUTH, as adbd with
// ro.adb.secure=1 does, so the real adb server lists it `unauthorized`) fails
// EnsureDevice with device_unauthorized once, not retried, with a summary
// telling the user to accept the prompt; once authorized, the same device
// runs the chain.
func TestChainUnauthorizedDevice(t *testing.T) {
	srv := simtest.StartADBServer(t)
	p := simtest.Profile(t, "unauthorized")
	p.Faults.UnauthorizedFor = 60 * time.Second // long enough for the first run (incl. starting Appium), whatever the load
	emu, _ := simtest.Launch(t, srv, p)
	srv.WaitState(t, emu.Serial(), "unauthorized", 10*time.Second)
	e := &chainEnv{srv: srv, emu: emu, serial: emu.Serial(), dataDir: t.TempDir()}
	t.Cleanup(func() { appium.StopLocal(e.dataDir) })

	apk, _ := filepath.Abs(fixtureAPK("demo-v1.apk"))
	res := runCLI(t, e.runCmd(apk, signerDigest(t, apk)))
	if res.Err == nil || res.Out["success"] != false {
		t.Fatalf("run on an unauthorized device: err %v\n%s", res.Err, res.Raw)
	}
	errs, _ := res.Out["errors"].([]any)
	if len(errs) != 1 {
		t.Fatalf("errors: %s", res.Raw)
	}
	e0 := errs[0].(map[string]any)
	msg, _ := e0["message"].(string)
	if e0["error_id"] != string(agent.ErrDeviceUnauthorized) || e0["node_id"] != nodes.NodeEnsureDevice ||
		e0["retryable"] != false || e0["attempts"] != float64(1) || !strings.Contains(msg, "accept the RSA key prompt") {
		t.Fatalf("want device_unauthorized once, not retryable, telling to accept the prompt: %v", e0)
	}

	// The user accepts the prompt: the device turns `device`.
	srv.WaitState(t, emu.Serial(), "device", 90*time.Second)
	res = runCLI(t, e.runCmd(apk, signerDigest(t, apk)))
	if res.Err != nil || res.Out["status"] != string(agent.RunFinished) {
		t.Fatalf("after authorization: %v\n%s", res.Err, res.Raw)
	}
}
