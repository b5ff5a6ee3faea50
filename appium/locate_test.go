package appium

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/screengraph/screengraph-agent/agent"
)

// fakeBin writes an executable file at p (Locate only checks that it is one).
func fakeBin(t *testing.T, p string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// Each place Locate looks, alone, from a directory outside any checkout.
func TestLocateOutsideCheckout(t *testing.T) {
	outside := t.TempDir()
	wd := func() (string, error) { return outside, nil }
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

	t.Run("nothing", func(t *testing.T) {
		data := t.TempDir()
		_, err := Locate(LocateConfig{DataDir: data, Getwd: wd, Getenv: env(map[string]string{"PATH": t.TempDir()})})
		var e *agent.Error
		if !errors.As(err, &e) || e.ID != agent.ErrProcess {
			t.Fatalf("err = %v", err)
		}
		// The message names every place tried and the fix.
		for _, want := range []string{"--appium-binary (not given)", "not inside a checkout", "appium on PATH",
			"APPIUM_HOME not set", filepath.Join(data, "appium", "node_modules", ".bin", "appium") + " (missing)",
			"screengraph-agent setup appium"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error lacks %q:\n%v", want, err)
			}
		}
	})
	t.Run("flag", func(t *testing.T) {
		bin := fakeBin(t, filepath.Join(t.TempDir(), "my-appium"))
		in, err := Locate(LocateConfig{Bin: bin, Getwd: wd, Getenv: env(nil)})
		if err != nil || in.Bin != bin || in.Source != "--appium-binary" {
			t.Fatalf("%+v %v", in, err)
		}
		// An explicit binary that is not one fails, without falling back.
		_, err = Locate(LocateConfig{Bin: filepath.Join(t.TempDir(), "none"), Getwd: wd, Getenv: env(nil)})
		if err == nil || !strings.Contains(err.Error(), "--appium-binary") || !strings.Contains(err.Error(), "missing") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("PATH", func(t *testing.T) {
		dir := t.TempDir()
		bin := fakeBin(t, filepath.Join(dir, "appium"))
		in, err := Locate(LocateConfig{Getwd: wd, Getenv: env(map[string]string{"PATH": t.TempDir() + ":" + dir})})
		if err != nil || in.Bin != bin || in.Source != "PATH" || in.Home != "" {
			t.Fatalf("%+v %v", in, err)
		}
	})
	t.Run("APPIUM_HOME", func(t *testing.T) {
		home := t.TempDir()
		bin := fakeBin(t, filepath.Join(home, "node_modules", ".bin", "appium"))
		in, err := Locate(LocateConfig{Getwd: wd, Getenv: env(map[string]string{"APPIUM_HOME": home})})
		if err != nil || in.Bin != bin || in.Source != "APPIUM_HOME" || in.Home != home {
			t.Fatalf("%+v %v", in, err)
		}
	})
	t.Run("data dir", func(t *testing.T) {
		data := t.TempDir()
		bin := fakeBin(t, filepath.Join(InstallDir(data), "node_modules", ".bin", "appium"))
		if err := os.MkdirAll(filepath.Join(InstallDir(data), "home"), 0o755); err != nil {
			t.Fatal(err)
		}
		in, err := Locate(LocateConfig{DataDir: data, Getwd: wd, Getenv: env(nil)})
		if err != nil || in.Bin != bin || in.Source != "data dir" || in.Home != filepath.Join(InstallDir(data), "home") {
			t.Fatalf("%+v %v", in, err)
		}
	})
	t.Run("not executable", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "appium"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if in, err := Locate(LocateConfig{Getwd: wd, Getenv: env(map[string]string{"PATH": dir})}); err == nil {
			t.Fatalf("found %+v", in)
		}
	})
}

// Inside the checkout (this test's working directory) its own install wins.
func TestLocateInCheckout(t *testing.T) {
	root := repoRootFrom(os.Getwd)
	if root == "" {
		t.Fatal("the test runs inside the checkout")
	}
	p := filepath.Join(root, "tools", "node", "node_modules", ".bin", "appium")
	in, err := Locate(LocateConfig{Getenv: func(string) string { return "" }})
	if executable(p) != nil {
		if err == nil || !strings.Contains(err.Error(), "tools/setup.sh") {
			t.Fatalf("no checkout install, yet %+v %v", in, err)
		}
		return
	}
	if err != nil || in.Bin != p || in.Source != "checkout" {
		t.Fatalf("%+v %v", in, err)
	}
}

// The README walkthrough's case (issue 25): `setup appium` ran without
// --data-dir (so into the default data dir), serve runs with --data-dir
// elsewhere. The default install is found, and with it its home, where the
// driver is; a binary of such an install reached through --appium-binary,
// PATH or a symlink also gets that home (without it Appium ran with
// ~/.appium and every session failed: driver not found).
func TestLocateDefaultInstallFromAnyDataDir(t *testing.T) {
	outside := t.TempDir()
	wd := func() (string, error) { return outside, nil }
	xdg := t.TempDir()
	def := filepath.Join(xdg, "screengraph-agent")
	bin := fakeBin(t, filepath.Join(InstallDir(def), "node_modules", ".bin", "appium"))
	home := filepath.Join(InstallDir(def), "home")
	if err := os.MkdirAll(filepath.Join(home, "node_modules", "appium-uiautomator2-driver"), 0o755); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"XDG_DATA_HOME": xdg, "HOME": t.TempDir()}
	getenv := func(k string) string { return env[k] }

	other := t.TempDir() // serve --data-dir $PWD/sg-data: nothing installed there
	in, err := Locate(LocateConfig{DataDir: other, Getwd: wd, Getenv: getenv})
	if err != nil || in.Bin != bin || in.Source != "default data dir" || in.Home != home {
		t.Fatalf("%+v %v", in, err)
	}
	in, err = Locate(LocateConfig{Bin: bin, DataDir: other, Getwd: wd, Getenv: getenv})
	if err != nil || in.Source != "--appium-binary" || in.Home != home {
		t.Fatalf("--appium-binary: %+v %v", in, err)
	}
	link := filepath.Join(t.TempDir(), "appium")
	if err := os.Symlink(bin, link); err != nil {
		t.Fatal(err)
	}
	env["PATH"] = filepath.Dir(link)
	in, err = Locate(LocateConfig{DataDir: other, Getwd: wd, Getenv: getenv})
	if err != nil || in.Bin != link || in.Source != "PATH" || in.Home != home {
		t.Fatalf("PATH symlink: %+v %v", in, err)
	}
	// $APPIUM_HOME still wins over the home beside the binary.
	env["APPIUM_HOME"] = t.TempDir()
	in, err = Locate(LocateConfig{Bin: bin, Getwd: wd, Getenv: getenv})
	if err != nil || in.Home != env["APPIUM_HOME"] {
		t.Fatalf("APPIUM_HOME: %+v %v", in, err)
	}
	// With nothing installed anywhere, the error names the default install too.
	delete(env, "PATH")
	delete(env, "APPIUM_HOME")
	env["XDG_DATA_HOME"] = t.TempDir()
	_, err = Locate(LocateConfig{DataDir: other, Getwd: wd, Getenv: getenv})
	if err == nil || !strings.Contains(err.Error(), filepath.Join(env["XDG_DATA_HOME"], "screengraph-agent", "appium")) {
		t.Fatalf("err = %v", err)
	}
}
