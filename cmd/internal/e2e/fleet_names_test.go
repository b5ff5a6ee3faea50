package e2e

import (
	"encoding/json"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/service"
	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
	"github.com/screengraph/screengraph-agent/nodes"
)

// Two hosts (each its own adb server and emulator, both the default
// profile's model) on one Postgres: a run naming host B's device by its id
// (GET /v1/devices), submitted to A, is driven by B on that device; runs
// naming the model or "android-<API level>" go to either host's device,
// each driven on the device its lease holds (EnsureDevice's deviceId is the
// lease's serial, never a device resolved from the name).
func TestFleetDeviceNamesAcrossHosts(t *testing.T) {
	slow(t, "a fleet on Postgres and NATS, two hosts")
	f := startFleet(t)
	var ds []*daemon
	var devs []service.Device
	for range 2 {
		srv := simtest.StartADBServer(t)
		launchDefault(t, srv)
		d := startDaemon(t, srv, f.daemonArgs()...)
		var v struct {
			Devices []service.Device `json:"devices"`
		}
		if d.call(t, "GET", "/v1/devices", nil, &v); len(v.Devices) != 1 || v.Devices[0].ID == "" || v.Devices[0].Model == "" || v.Devices[0].APILevel == 0 {
			t.Fatalf("devices: %+v", v)
		}
		ds = append(ds, d)
		devs = append(devs, v.Devices[0])
	}
	if devs[0].ID == devs[1].ID || devs[0].Model != devs[1].Model {
		t.Fatalf("devices %+v: want two devices of one model with their own ids", devs)
	}
	apk, _ := filepath.Abs(fixtureAPK("demo-v1.apk"))
	sha := signerDigest(t, apk)
	a := ds[0]
	byB := a.submit(t, runBody(devs[1].ID, "file://"+apk, sha, "ALWAYS_REINSTALL", "FORCE_RESTART", nil))
	byModel := a.submit(t, runBody(devs[0].Model, "file://"+apk, sha, "", "", nil))
	byLevel := a.submit(t, runBody("android-"+strconv.Itoa(devs[0].APILevel), "file://"+apk, sha, "", "", nil))
	ids := []string{byB, byModel, byLevel}
	a.waitStatus(t, ids, 3*time.Minute, agent.RunFinished, agent.RunFailed, agent.RunCanceled)
	all := a.leases(t, true)
	leased := map[string]agent.Lease{} // the run's last lease
	for _, l := range all {
		leased[l.RunID] = l
	}
	for _, id := range ids {
		if st := a.run(t, id).Status; st != agent.RunFinished {
			t.Fatalf("run %s ended %s\n%s\n%s", id, st, a.log(), ds[1].log())
		}
		l, ok := leased[id]
		if !ok || (l.Device != devs[0].ID && l.Device != devs[1].ID) {
			t.Fatalf("run %s: lease %+v, want one of %s, %s; leases %+v", id, l, devs[0].ID, devs[1].ID, all)
		}
		ens := finishedOf(t, a.events(t, id), nodes.NodeEnsureDevice)
		var out struct {
			DeviceRuntimeContext struct {
				DeviceID string `json:"deviceId"`
			} `json:"deviceRuntimeContext"`
		}
		if len(ens) == 0 || json.Unmarshal(ens[len(ens)-1].Output, &out) != nil || out.DeviceRuntimeContext.DeviceID != l.Serial {
			t.Fatalf("run %s: EnsureDevice %+v, want it on the leased %s", id, ens, l.Serial)
		}
	}
	if l := leased[byB]; l.Device != devs[1].ID {
		t.Fatalf("run naming %s was leased %s", devs[1].ID, l.Device)
	}
}
