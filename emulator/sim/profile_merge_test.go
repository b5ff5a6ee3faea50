package sim

import (
	"os"
	"path/filepath"
	"testing"
)

// TestPartialProfileMergesOverDefault: a profile file that sets only a fault
// and the display keeps everything else of the shipped default profile.
func TestPartialProfileMergesOverDefault(t *testing.T) {
	f := filepath.Join(t.TempDir(), "crashy.yaml")
	doc := "displayWidth: 720\nprops:\n  ro.product.brand: acme\nfaults:\n  appCrash: {package: com.example.app, exception: java.lang.IllegalStateException, message: boom, afterMillis: 250}\n"
	if err := os.WriteFile(f, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := LoadProfile(f)
	if err != nil {
		t.Fatal(err)
	}
	def, err := LoadProfile("default")
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "crashy" || p.APILevel != def.APILevel || p.DisplayWidth != 720 || p.DisplayHeight != def.DisplayHeight {
		t.Errorf("name %q api %d display %dx%d", p.Name, p.APILevel, p.DisplayWidth, p.DisplayHeight)
	}
	if len(p.Apps) != len(def.Apps) || len(p.Apps) == 0 || len(p.Preinstalled) != len(def.Preinstalled) {
		t.Errorf("apps/preinstalled not taken from the default: %d/%d", len(p.Apps), len(p.Preinstalled))
	}
	if c := p.Faults.AppCrash; c == nil || c.Package != "com.example.app" || c.AfterMillis != 250 {
		t.Errorf("fault %+v", c)
	}
	if p.Props["ro.product.brand"] != "acme" {
		t.Errorf("props %v", p.Props)
	}
	if def.Faults.AppCrash != nil || def.DisplayWidth != 1080 {
		t.Error("loading a partial profile changed the default")
	}
	// A list the file sets replaces the default's.
	f2 := filepath.Join(t.TempDir(), "noapps.yaml")
	if err := os.WriteFile(f2, []byte("apps: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if p2, err := LoadProfile(f2); err != nil || len(p2.Apps) != 0 || len(p2.Preinstalled) == 0 {
		t.Errorf("apps: [] -> %d apps, %d preinstalled, %v", len(p2.Apps), len(p2.Preinstalled), err)
	}
	// Unknown fields stay errors.
	f3 := filepath.Join(t.TempDir(), "typo.yaml")
	if err := os.WriteFile(f3, []byte("faults:\n  appCrsh: {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadProfile(f3); err == nil {
		t.Error("typo accepted")
	}
}
