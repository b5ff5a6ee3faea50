package parse

import (
	"errors"
	"strings"
	"testing"
)

// Fuzz targets: every parser must not panic on any input, and where a property
// holds for every input it is checked. Seeds are the real captures.

func seedCaptures(f *testing.F, dirs ...string) {
	for _, d := range dirs {
		for _, rel := range captures(f, d) {
			f.Add(capture(f, rel))
		}
	}
}

func FuzzParseGetprop(f *testing.F) {
	seedCaptures(f, "getprop", "getprop-single")
	f.Add("[a]: [1]\n[b]: [multi\nline]\n")
	f.Fuzz(func(t *testing.T, s string) {
		for k := range ParseGetprop(s) {
			if !strings.Contains(s, "["+k+"]: [") {
				t.Fatalf("key %q not in input", k)
			}
		}
		_ = ParseGetpropValue(s)
	})
}

func FuzzParseBootStatus(f *testing.F) {
	f.Add("1\n1\nstopped\n", "Found 1 services:\n0\tactivity: [android.app.IActivityManager]\n")
	f.Add("", "")
	f.Fuzz(func(t *testing.T, boot, svc string) {
		b := ParseBootStatus(boot, svc)
		if b.Ready && (!b.SysBootCompleted || len(b.MissingServices) > 0 || b.Reason != "") {
			t.Fatalf("ready with %+v", b)
		}
		if !b.Ready && b.Reason == "" {
			t.Fatalf("not ready without reason: %+v", b)
		}
	})
}

func FuzzParseServiceList(f *testing.F) {
	seedCaptures(f, "service-list")
	f.Add("Found 2 services:\n0\tDockObserver: []\n1\tactivity: [android.app.IActivityManager]\n")
	f.Fuzz(func(t *testing.T, s string) {
		for _, svc := range ParseServiceList(s) {
			if svc.Name == "" || !strings.Contains(s, svc.Name+":") {
				t.Fatalf("service %+v not in input", svc)
			}
		}
	})
}

func FuzzParsePackageList(f *testing.F) {
	seedCaptures(f, "pm-list-packages", "pm-path")
	f.Add("package:a.b versionCode:3\npackage:/x==/base.apk=c.d\n")
	f.Fuzz(func(t *testing.T, s string) {
		for _, p := range ParsePackageList(s) {
			if p.Package == "" || !strings.Contains(s, p.Package) || p.VersionCode < 0 {
				t.Fatalf("entry %+v", p)
			}
		}
		for _, p := range ParsePmPath(s) {
			if !strings.Contains(s, "package:"+p) {
				t.Fatalf("path %q", p)
			}
		}
	})
}

func FuzzParseDumpsysPackage(f *testing.F) {
	seedCaptures(f, "dumpsys-package")
	f.Fuzz(func(t *testing.T, s string) {
		for _, pkg := range []string{"com.tekartik.package1", "com.example.foodies", "x"} {
			info, ok := ParseDumpsysPackage(s, pkg)
			if ok && (!strings.Contains(s, "Package ["+pkg+"]") || info.Package != pkg) {
				t.Fatalf("found %q not in input", pkg)
			}
			if !ok && info.VersionCode != 0 {
				t.Fatalf("not found but %+v", info)
			}
		}
	})
}

func FuzzParseWindowFocus(f *testing.F) {
	seedCaptures(f, "dumpsys-window-windows", "dumpsys-activity-activities")
	f.Add("  Display: mDisplayId=0\n    mCurrentFocus=null\n    mFocusedApp=ActivityRecord{1 u0 a/.B t3}\n")
	f.Fuzz(func(t *testing.T, s string) {
		ds := ParseWindowFocus(s)
		for _, d := range ds {
			for _, c := range []Component{d.CurrentFocus, d.FocusedApp} {
				if !c.IsZero() && !strings.Contains(s, c.Package+"/") {
					t.Fatalf("component %v not in input", c)
				}
			}
		}
		if fg, ok := Foreground(ds); ok {
			found := false
			for _, d := range ds {
				found = found || fg == d.CurrentFocus || fg == d.FocusedApp
			}
			if !found {
				t.Fatalf("foreground %v is no display's focus", fg)
			}
		}
		if c, ok := ParseResumedActivity(s); ok && !strings.Contains(s, c.Package+"/") {
			t.Fatalf("resumed %v not in input", c)
		}
		for _, a := range ParseActivityTop(s) {
			if !strings.Contains(s, "ACTIVITY "+a.Component.Package+"/") || a.PID < 0 {
				t.Fatalf("top %+v", a)
			}
		}
	})
}

func FuzzParseAmStart(f *testing.F) {
	seedCaptures(f, "am-start-W", "am-start", "am-start-errors")
	f.Add("Error type 3\nError: Activity class {a/a.B} does not exist.\n")
	f.Fuzz(func(t *testing.T, s string) {
		_, err := ParseAmStart(s)
		var e *Error
		if err != nil && (!errors.As(err, &e) || e.ID == "") {
			t.Fatalf("err %v is not a classified *Error", err)
		}
	})
}

func FuzzParseGfxinfo(f *testing.F) {
	seedCaptures(f, "dumpsys-gfxinfo")
	f.Add("** Graphics info for pid 1 [a] **\nTotal frames rendered: 3\nJanky frames: 1 (33.3%)\n")
	f.Add("Physical size: 1080x1920\nOverride size: 720x1280\n")
	f.Fuzz(func(t *testing.T, s string) {
		if g, ok := ParseGfxinfo(s); ok && g.TotalFrames < 0 {
			t.Fatalf("%+v", g)
		}
		if f, ok := ParseFramestats(s); ok {
			if d, known := f.SinceLastFrame(); f.Windows < 1 || f.Frames < 0 || (known && d < 0) {
				t.Fatalf("%+v %v", f, d)
			}
		}
		if d, ok := ParseWmSize(s); ok && d.PhysicalWidth <= 0 {
			t.Fatalf("%+v", d)
		}
	})
}

func FuzzParseInstallOutput(f *testing.F) {
	seedCaptures(f, "adb-install", "pm-install", "adb-uninstall")
	f.Add("Success\n")
	f.Add("Failure [INSTALL_FAILED_TEST_ONLY]")
	f.Fuzz(func(t *testing.T, s string) {
		err := ParseInstallOutput(s)
		success := false
		for _, l := range lines(s) {
			success = success || strings.TrimSpace(l) == "Success"
		}
		if success != (err == nil) {
			t.Fatalf("success=%v err=%v", success, err)
		}
		if err != nil {
			e := err.(*Error)
			if e.ID != IDInstallFailed || e.Retryable || (e.Code != "" && !strings.Contains(s, e.Code)) {
				t.Fatalf("%+v", e)
			}
		}
	})
}

func FuzzParseDevices(f *testing.F) {
	f.Add("127.0.0.1:17001        offline transport_id:1\nemulator-5554          device product:p model:m device:d transport_id:2\n")
	f.Add("a\tdevice\nb\toffline\n")
	f.Fuzz(func(t *testing.T, s string) {
		n := strings.Count(s, "\n") + 1
		for _, ds := range [][]DeviceInfo{ParseDevicesLong(s), ParseDevices(s)} {
			if len(ds) > n {
				t.Fatalf("%d devices from %d lines", len(ds), n)
			}
			for _, d := range ds {
				if d.Serial == "" || !strings.Contains(s, d.Serial) || d.State == "" {
					t.Fatalf("%+v", d)
				}
			}
		}
		for k := range ParseFeatures(s) {
			if !strings.Contains(s, k) {
				t.Fatalf("feature %q", k)
			}
		}
	})
}

func FuzzParseComponent(f *testing.F) {
	f.Add("com.a/.Main")
	f.Add("a/b/c")
	f.Fuzz(func(t *testing.T, s string) {
		c, ok := ParseComponent(s)
		if !ok {
			return
		}
		c2, ok2 := ParseComponent(c.String())
		if !ok2 || c2 != c {
			t.Fatalf("%q -> %v -> %v", s, c, c2)
		}
	})
}
