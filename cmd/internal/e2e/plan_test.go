package e2e

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
)

// TestServeCorrectsNodeInputKeyCase: through the serve binary, a run request
// whose node-input keys differ from the schema's only by case is accepted in
// coerce mode (the default) and runs FINISHED; GET /v1/runs/{id} shows the
// stored plan (version 1, keys corrected, the corrections listed). A case
// variant of tenantId inside a node input is refused in coerce mode, and any
// case variant in strict mode: 400 naming the key, nothing stored.
func TestServeCorrectsNodeInputKeyCase(t *testing.T) {
	slow(t, "a chain through a real Appium")
	srv := simtest.StartADBServer(t)
	emu, _ := launchDefault(t, srv)
	d := startDaemon(t, srv)
	apk, _ := filepath.Abs(fixtureAPK("demo-v1.apk"))
	sha := signerDigest(t, apk)

	body := runBody(emu.Serial(), "file://"+apk, sha, "", "", map[string]any{"MinQuietMillis": "300"})
	body["ensureDevice"] = map[string]any{"DeviceConfiguration": map[string]any{"PlatformName": "android", "deviceName": emu.Serial()}}
	pa := body["provisionApp"].(map[string]any)
	pa["InstallationPolicy"] = "always_reinstall"

	for _, c := range []struct {
		mode, node, key, want string
	}{
		{"", "ensureDevice", "TenantID", `key \"TenantID\" at $.ensureDevice matches field \"tenantId\" only by case`},
		{"lenient", "launchOrAttach", "tenantid", `key \"tenantid\" at $.launchOrAttach matches field \"tenantId\" only by case`},
		{"strict", "", "", `key \"DeviceConfiguration\" at $.ensureDevice matches field \"deviceConfiguration\" only by case`},
	} {
		bad := map[string]any{}
		b, _ := json.Marshal(body)
		json.Unmarshal(b, &bad)
		if c.mode != "" {
			bad["schemaMode"] = c.mode
		}
		if c.node != "" {
			bad[c.node].(map[string]any)[c.key] = "beta"
		}
		var e json.RawMessage
		if st := d.call(t, "POST", "/v1/runs", bad, &e); st != http.StatusBadRequest || !strings.Contains(string(e), "invalid_request_error") || !strings.Contains(string(e), c.want) {
			t.Errorf("mode %q, %s.%s: %d %s, want 400 saying %s", c.mode, c.node, c.key, st, e, c.want)
		}
	}
	var list struct {
		Runs []json.RawMessage `json:"runs"`
	}
	if d.call(t, "GET", "/v1/runs", nil, &list); len(list.Runs) != 0 {
		t.Fatalf("refused requests stored runs: %s", list.Runs)
	}

	id := d.submit(t, body)
	d.waitStatus(t, []string{id}, 3*time.Minute, agent.RunFinished, agent.RunFailed, agent.RunCanceled)
	var v struct {
		Status agent.RunStatus `json:"status"`
		Input  struct {
			Plan struct {
				Version   int    `json:"version"`
				RunID     string `json:"runId"`
				Coercions []struct {
					Path string `json:"path"`
					Rule string `json:"rule"`
				} `json:"coercions"`
			} `json:"plan"`
			EnsureDevice struct {
				RunID               string            `json:"runId"`
				TenantID            string            `json:"tenantId"`
				DeviceConfiguration map[string]string `json:"deviceConfiguration"`
			} `json:"ensureDevice"`
			ProvisionApp struct {
				InstallationPolicy string `json:"installationPolicy"`
			} `json:"provisionApp"`
		} `json:"input"`
	}
	if st := d.call(t, "GET", "/v1/runs/"+id, nil, &v); st != http.StatusOK || v.Status != agent.RunFinished {
		t.Fatalf("run %s: %d %s\n%s", id, st, v.Status, d.log())
	}
	in := v.Input
	if in.Plan.Version != 1 || in.Plan.RunID != id || in.EnsureDevice.RunID != id || in.EnsureDevice.TenantID == "" ||
		in.EnsureDevice.DeviceConfiguration["platformName"] != "android" || in.ProvisionApp.InstallationPolicy != "ALWAYS_REINSTALL" {
		t.Errorf("stored plan: %+v", in)
	}
	corrected := map[string]bool{}
	for _, c := range in.Plan.Coercions {
		corrected[c.Rule+" "+c.Path] = true
	}
	for _, want := range []string{"property-case /ensureDevice/DeviceConfiguration", "property-case /provisionApp/InstallationPolicy",
		"enum-case /provisionApp/installationPolicy", "property-case /waitIdle/idleHeuristicsConfiguration/MinQuietMillis"} {
		if !corrected[want] {
			t.Errorf("no coercion %q in %+v", want, in.Plan.Coercions)
		}
	}
}
