package nodes

import (
	"context"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/screengraph/screengraph-agent/emulator/sim/android"
	"github.com/screengraph/screengraph-agent/fixtures"
)

// warmChainShells is how many adb shell services a warm setup chain (app
// installed and its signer cached, Appium session reused, app in front and
// settled) opens on the device: every shell is a new connection through the
// adb server, so this count is the chain's adb cost.
const warmChainShells = 5

// TestWarmChainShellCount runs EnsureDevice -> ProvisionApp -> LaunchOrAttach
// -> WaitIdle twice on the device model (real shell grammar and outputs) and
// counts the shell commands of the second, warm, chain.
func TestWarmChainShellCount(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		d := newModelWithAPKs(t)
		drv := &fakeDriver{}
		mem := &MemorySessions{}
		cache := &MemoryVerifications{}
		chain := func() {
			t.Helper()
			p := Ports{Device: d, Driver: drv}
			eout, err := EnsureDevice(ctx, ensureIn(""), p, mem)
			if err != nil {
				t.Fatalf("EnsureDevice: %v", err)
			}
			drc := eout.DeviceRuntimeContext
			desc := ApplicationUnderTestDescriptor{AndroidPackageID: demoPkg, APKStorageObjectReference: "fixture:demo-v1.apk",
				ExpectedBuildSignatureSHA256: provSignerA}
			pout, err := ProvisionApp(ctx, ProvisionAppInput{RunID: "01JRUN", DeviceRuntimeContext: drc,
				ApplicationUnderTestDescriptor: desc}, p, ProvisionDeps{Artifacts: &provFetcher{}, Verifications: cache, TempDir: t.TempDir()})
			if err != nil {
				t.Fatalf("ProvisionApp: %v", err)
			}
			if o := pout.ApplicationProvisioningOutcome; o == nil || o.SignatureValidationStatus != SignatureMatched {
				t.Errorf("provisioning outcome %+v", o)
			}
			lin := launchIn(LaunchOrAttachMode, "")
			lin.DeviceRuntimeContext = drc
			lout, err := LaunchOrAttach(ctx, lin, p)
			if err != nil {
				t.Fatalf("LaunchOrAttach: %v", err)
			}
			if fc := lout.ApplicationForegroundContext; fc.CurrentActivityName != "com.example.app.HomeActivity" {
				t.Errorf("foreground %+v", fc)
			}
			win := idleIn(500, 5000)
			win.DeviceRuntimeContext = drc
			wout, err := WaitIdle(ctx, win, p)
			if err != nil {
				t.Fatalf("WaitIdle: %v", err)
			}
			if a := wout.UIStabilityAssessment; a.NetworkInFlightStatus != NetworkNone || a.QuietWindowObservedMillis < 500 {
				t.Errorf("assessment %+v", a)
			}
		}
		chain() // cold: session created, signer pulled and cached, app launched
		time.Sleep(3 * time.Second)
		d.mu.Lock()
		d.calls = nil
		d.mu.Unlock()
		chain()
		d.mu.Lock()
		calls := d.calls
		d.mu.Unlock()
		if len(drv.created) != 1 {
			t.Errorf("warm chain created a session (%d created)", len(drv.created))
		}
		if len(calls) != warmChainShells {
			t.Errorf("warm chain opened %d shells, want %d:", len(calls), warmChainShells)
		}
		for i, c := range calls {
			t.Logf("shell %d: %s", i+1, c)
		}
	})
}

// newModelWithAPKs is newModel with the preinstalled packages installed from
// their APKs (as emulator/sim launches them), so base.apk can be pulled.
func newModelWithAPKs(t *testing.T) *modelDevice {
	t.Helper()
	return newModelWith(t, func(p *android.Profile) {
		for i, pk := range p.Preinstalled {
			if pk.APK == "" {
				continue
			}
			b, err := fixtures.APK(filepath.Base(pk.APK))
			if err != nil {
				t.Fatal(err)
			}
			p.Preinstalled[i].APKData = b
		}
	})
}
