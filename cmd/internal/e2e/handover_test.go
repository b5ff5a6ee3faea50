package e2e

import (
	"bytes"
	"encoding/json"
	"image/png"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/httpapi"
	"github.com/screengraph/screengraph-agent/emulator/sim/android"
	"github.com/screengraph/screengraph-agent/emulator/sim/simtest"
)

// tenantClient is a tenant's HTTP client of a daemon: its API token on
// every request.
type tenantClient struct {
	d     *daemon
	token string
}

func (c tenantClient) do(t *testing.T, method, path string, body any) (int, []byte) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, c.d.URL()+path, r)
	if r != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func (c tenantClient) submit(t *testing.T, body map[string]any) string {
	t.Helper()
	st, b := c.do(t, "POST", "/v1/runs", body)
	var resp struct {
		RunID string `json:"runId"`
	}
	if st != http.StatusAccepted || json.Unmarshal(b, &resp) != nil || resp.RunID == "" {
		t.Fatalf("submit: %d %s", st, b)
	}
	return resp.RunID
}

func (c tenantClient) waitEnded(t *testing.T, id string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		_, b := c.do(t, "GET", "/v1/runs/"+id, nil)
		var v runView
		_ = json.Unmarshal(b, &v)
		if v.Status.Terminal() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s still %s after %v\n%s", id, v.Status, timeout, c.d.log())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (c tenantClient) events(t *testing.T, id string) []agent.Event {
	t.Helper()
	st, b := c.do(t, "GET", "/v1/runs/"+id+"/events", nil)
	var v struct {
		Events []agent.Event `json:"events"`
	}
	if st != 200 || json.Unmarshal(b, &v) != nil {
		t.Fatalf("events of %s: %d %s", id, st, b)
	}
	return v.Events
}

// failure is the run's errorId and failed node from agent.run.failed.
func (c tenantClient) failure(t *testing.T, id string) (agent.ErrorID, string) {
	t.Helper()
	for _, e := range c.events(t, id) {
		if e.Kind == agent.KindRunFailed {
			var p agent.RunEndedPayload
			if err := json.Unmarshal(e.Payload, &p); err != nil || p.ErrorID == nil {
				t.Fatalf("run.failed %s: %v", e.Payload, err)
			}
			return *p.ErrorID, p.FailedNode
		}
	}
	t.Fatalf("run %s did not fail", id)
	return "", ""
}

// artifacts downloads every artifact of the run, by kind.
func (c tenantClient) artifacts(t *testing.T, id string) map[string][]byte {
	t.Helper()
	st, b := c.do(t, "GET", "/v1/runs/"+id+"/artifacts", nil)
	var v httpapi.ArtifactsResponse
	if st != 200 || json.Unmarshal(b, &v) != nil {
		t.Fatalf("artifacts of %s: %d %s", id, st, b)
	}
	out := map[string][]byte{}
	for _, a := range v.Artifacts {
		st, data := c.do(t, "GET", "/v1/runs/"+id+"/artifacts/"+a.ArtifactID, nil)
		if st != 200 || int64(len(data)) != a.Bytes {
			t.Fatalf("artifact %s of %s: %d, %d bytes of %d", a.Kind, id, st, len(data), a.Bytes)
		}
		out[a.Kind] = data
	}
	return out
}

// hasDialogScrim reports whether a simulator screenshot shows an error
// dialog: the simulator draws one over a scrim of grey 0x7f (screencap.go),
// a colour nothing else on its screens has.
func hasDialogScrim(t *testing.T, shot []byte) bool {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(shot))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y += 7 {
		for x := b.Min.X; x < b.Max.X; x += 7 {
			r, g, bl, _ := img.At(x, y).RGBA()
			if r>>8 == 0x7f && g>>8 == 0x7f && bl>>8 == 0x7f {
				return true
			}
		}
	}
	return false
}

// TestServeDeviceHandoverBetweenTenants (issue 22 item 2): two tenants share
// one device through serve, each with its API token. Tenant beta's run
// launches an app that stops responding (the simulator's ANR fault) and
// fails in WaitIdle with the ANR dialog up; tenant acme's two runs, queued
// behind it, fail in ProvisionApp, one naming another package, one naming
// beta's. Neither keeps a trace of beta's run in any artifact: the
// screenshot shows no dialog, the hierarchy is the launcher's, the logcat
// holds no line of beta's app or its ANR, and there are no ANR traces. The
// first acme run's events record the reset (agent.device.reset, naming
// neither beta nor its app); the second, after acme's own run, has none.
// Before the handover rule, the first acme run's screenshot and hierarchy
// showed beta's ANR dialog, its logcat (a window from its submission, no
// process filter) beta's "ANR in", and the second run's ANR traces beta's.
func TestServeDeviceHandoverBetweenTenants(t *testing.T) {
	if testing.Short() {
		t.Skip("drives serve, the simulator and Appium")
	}
	srv := simtest.StartADBServer(t)
	prof := simtest.Profile(t, "default")
	prof.Faults.AppNotResponding = &android.AppANRFault{Package: appPkg}
	emu, dev := simtest.Launch(t, srv, prof)
	srv.WaitState(t, emu.Serial(), "device", 10*time.Second)
	serial := emu.Serial()
	d := startDaemon(t, srv)
	token := func(tenant string) tenantClient {
		t.Helper()
		out, err := exec.Command(buildAgent(t), "token", "create", "--data-dir", d.dataDir, "--tenant", tenant, "--output", "json").Output()
		var ct tokenCreated
		if err != nil || json.Unmarshal(out, &ct) != nil || !agent.LooksLikeToken(ct.Token) {
			t.Fatalf("token create --tenant %s: %v %s", tenant, err, out)
		}
		return tenantClient{d: d, token: ct.Token}
	}
	acme, beta := token("acme"), token("beta")

	apk, _ := filepath.Abs(fixtureAPK("demo-v1.apk"))
	sha := signerDigest(t, apk)
	hang := runBody(serial, "file://"+apk, sha, "", "", nil)
	hang["launchOrAttach"].(map[string]any)["applicationUnderTestDescriptor"].(map[string]any)["androidLaunchActivityName"] = ".SpinnerActivity"
	betaRun := beta.submit(t, hang)
	// acme's runs wait behind beta's on the one device, and fail in
	// ProvisionApp before launching anything: a package the APK is not, and
	// beta's package with a signer it does not have.
	other := runBody(serial, "file://"+apk, sha, "", "", nil)
	for _, n := range []string{"provisionApp", "launchOrAttach"} {
		other[n].(map[string]any)["applicationUnderTestDescriptor"].(map[string]any)["androidPackageId"] = "com.example.other"
	}
	acmeOther := acme.submit(t, other)
	acmeSame := acme.submit(t, runBody(serial, "file://"+apk, strings.Repeat("ab", 32), "", "", nil))

	for _, c := range []struct {
		cl tenantClient
		id string
	}{{beta, betaRun}, {acme, acmeOther}, {acme, acmeSame}} {
		c.cl.waitEnded(t, c.id, 4*time.Minute)
	}
	if id, node := beta.failure(t, betaRun); id != agent.ErrAppNotResponding || node != "WaitIdle" {
		t.Fatalf("beta's run failed with %s in %s, want app_not_responding in WaitIdle", id, node)
	}
	// What beta's run left: its ANR dialog on its screenshot, its pids in
	// its ANR traces (the check below is meaningful only with both).
	betaEv := beta.artifacts(t, betaRun)
	if !hasDialogScrim(t, betaEv[agent.ArtifactScreenshot]) {
		t.Fatal("beta's screenshot shows no ANR dialog: the scenario did not happen")
	}
	pids := regexp.MustCompile(`(?m)^PID: (\d+)$`).FindAllStringSubmatch(string(betaEv[agent.ArtifactANRTraces]), -1)
	if len(pids) == 0 {
		t.Fatalf("beta's ANR traces name no pid:\n%.2000s", betaEv[agent.ArtifactANRTraces])
	}
	// beta's run did log its ANR on the device (what a window from before
	// acme's lease would show).
	var devLog bytes.Buffer
	dev.Shell(t.Context(), "logcat -d", nil, &devLog, io.Discard)
	if !strings.Contains(devLog.String(), "ANR in "+appPkg) {
		t.Fatalf("the device's log lacks beta's ANR:\n%.3000s", devLog.String())
	}
	if !strings.Contains(devLog.String(), "Force stopping "+appPkg) {
		t.Errorf("the device's log lacks the reset's force-stop of beta's app")
	}
	// Strings only beta's run can have put on the device.
	traces := []*regexp.Regexp{regexp.MustCompile(`ANR in `), regexp.MustCompile(`(?i)not responding`), regexp.MustCompile(`isn't responding`),
		regexp.MustCompile(`aerr_`), regexp.MustCompile(`SpinnerActivity`), regexp.MustCompile(`Force stopping`), regexp.MustCompile(`data_app_anr`)}
	var pidTraces []*regexp.Regexp // in logs only: a hierarchy's bounds hold numbers too
	for _, p := range pids {
		pidTraces = append(pidTraces, regexp.MustCompile(`\b`+p[1]+`\b`))
	}

	for i, id := range []string{acmeOther, acmeSame} {
		if eid, node := acme.failure(t, id); node != "ProvisionApp" {
			t.Fatalf("acme run %d failed with %s in %s, want a ProvisionApp failure", i, eid, node)
		}
		ev := acme.artifacts(t, id)
		// The logcat may be missing: nothing logs while a run fails in
		// ProvisionApp, and the window holds only the run's lease.
		if len(ev[agent.ArtifactScreenshot]) == 0 || len(ev[agent.ArtifactUIHierarchy]) == 0 {
			t.Errorf("acme run %d kept %d kinds, want a screenshot and a hierarchy at least", i, len(ev))
		}
		if hasDialogScrim(t, ev[agent.ArtifactScreenshot]) {
			t.Errorf("acme run %d: the screenshot shows an error dialog (beta's ANR)", i)
		}
		if h := string(ev[agent.ArtifactUIHierarchy]); !strings.Contains(h, "nexuslauncher") {
			t.Errorf("acme run %d: the hierarchy is not the launcher's:\n%.3000s", i, h)
		}
		if a, ok := ev[agent.ArtifactANRTraces]; ok {
			t.Errorf("acme run %d kept ANR traces:\n%.2000s", i, a)
		}
		for _, kind := range []string{agent.ArtifactUIHierarchy, agent.ArtifactLogcat, agent.ArtifactANRTraces} {
			res := traces
			if kind != agent.ArtifactUIHierarchy {
				res = append(slices.Clip(traces), pidTraces...)
			}
			for _, re := range res {
				if loc := re.FindIndex(ev[kind]); loc != nil {
					lo, hi := max(0, loc[0]-300), min(len(ev[kind]), loc[1]+300)
					t.Errorf("acme run %d: %s holds %q of beta's run: …%s…", i, kind, re, ev[kind][lo:hi])
				}
			}
		}
		var resets []agent.DeviceResetPayload
		for _, e := range acme.events(t, id) {
			if e.Kind == agent.KindDeviceReset {
				var p agent.DeviceResetPayload
				if err := json.Unmarshal(e.Payload, &p); err != nil {
					t.Fatal(err)
				}
				if strings.Contains(string(e.Payload), "beta") || strings.Contains(string(e.Payload), betaRun) || strings.Contains(string(e.Payload), appPkg) {
					t.Errorf("acme's reset event names beta's run: %s", e.Payload)
				}
				resets = append(resets, p)
			}
		}
		switch {
		case i == 0 && (len(resets) != 1 || resets[0].Reason != agent.ResetTenantChange || resets[0].Outcome != agent.OutcomeSuccess ||
			resets[0].StoppedApps != 1 || !resets[0].WentHome || resets[0].DeviceTime == "" || resets[0].TenantID != "acme"):
			t.Errorf("acme's first run: resets %+v, want one tenant_change reset", resets)
		case i == 1 && len(resets) != 0:
			t.Errorf("acme's second run (after acme's own): resets %+v, want none", resets)
		}
	}
	// beta does not see acme's runs, nor acme beta's.
	if st, _ := beta.do(t, "GET", "/v1/runs/"+acmeOther+"/events", nil); st != http.StatusNotFound {
		t.Errorf("beta reads acme's events: %d", st)
	}
}
