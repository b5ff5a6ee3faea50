package android

import (
	"errors"
	"io/fs"
	"strings"
	"testing"
	"time"
)

func TestSyncFilesystem(t *testing.T) {
	d, _ := newTestDevice(t, Profile{})
	mtime := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	// adb push creates missing parents.
	if err := d.WriteFile("/data/local/tmp/a/b/c.txt", []byte("hello"), 0o100644, mtime); err != nil {
		t.Fatal(err)
	}
	fi, err := d.Stat("/data/local/tmp/a/b/c.txt")
	if err != nil || fi.Mode != 0o100644 || fi.Size != 5 || !fi.MTime.Equal(mtime) || fi.Name != "c.txt" {
		t.Fatalf("stat: %+v %v", fi, err)
	}
	if fi, _ := d.Stat("/data/local/tmp/a"); fi.Mode&sIFMT != sIFDIR {
		t.Errorf("parent not a dir: %o", fi.Mode)
	}
	// /sdcard and /storage/emulated/0 are one directory.
	if err := d.WriteFile("/sdcard/Download/x.bin", []byte{1, 2}, 0o644, mtime); err != nil {
		t.Fatal(err)
	}
	if b, err := d.ReadFile("/storage/emulated/0/Download/x.bin"); err != nil || len(b) != 2 {
		t.Errorf("alias read: %v %v", b, err)
	}
	ents, err := d.ReadDir("/storage/self/primary/Download")
	if err != nil || len(ents) != 1 || ents[0].Name != "x.bin" {
		t.Errorf("readdir: %+v %v", ents, err)
	}
	for _, p := range []string{"/system/x", "/proc/y", "/data/app/z.apk", "/x"} {
		if err := d.WriteFile(p, nil, 0o644, mtime); !errors.Is(err, fs.ErrPermission) {
			t.Errorf("write %s: %v, want permission error", p, err)
		}
	}
	if _, err := d.ReadDir("/data"); !errors.Is(err, fs.ErrPermission) {
		t.Errorf("readdir /data: %v", err)
	}
	if _, err := d.Stat("/data/local/tmp/nope"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("stat missing: %v", err)
	}
	if err := d.Remove("/data/local/tmp/a"); err == nil {
		t.Errorf("removing a non-empty dir must fail")
	}
	if err := d.Remove("/data/local/tmp/a/b/c.txt"); err != nil {
		t.Errorf("remove: %v", err)
	}
	if _, err := d.ReadFile("/data/local/tmp/a/b/c.txt"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("read removed: %v", err)
	}
	// Generated files compute their content on each read, without d.mu held.
	n := 0
	d.addGeneratedFile("/proc/net/unix_test", func() []byte { d.Prop("ro.build.version.sdk"); n++; return []byte(strings.Repeat("x", n)) })
	a, _ := d.ReadFile("/proc/net/unix_test")
	b, _ := d.ReadFile("/proc/net/unix_test")
	if string(a) != "x" || string(b) != "xx" {
		t.Errorf("generated: %q %q", a, b)
	}
	if fi, _ := d.Stat("/proc/net/unix_test"); fi.Size != 0 || fi.Mode != 0o100444 {
		t.Errorf("generated stat: %+v", fi)
	}
	// A full /data refuses writes.
	small, _ := newTestDevice(t, Profile{FreeStorageBytes: 10})
	if err := small.WriteFile("/data/local/tmp/big", make([]byte, 11), 0o644, mtime); !errors.Is(err, errNoSpace) {
		t.Errorf("ENOSPC: %v", err)
	}
}

func TestShellFileTools(t *testing.T) {
	d, _ := newTestDevice(t, Profile{})
	tests := []struct {
		cmd, out, err string
		status        int
	}{
		{"mkdir -p /data/local/tmp/appium_cache && ls /data/local/tmp", "appium_cache\n", "", 0},
		{"mkdir /data/local/tmp/appium_cache", "", "mkdir: /data/local/tmp/appium_cache: File exists\n", 1},
		{"touch /data/local/tmp/appium_cache/a.apk && ls /data/local/tmp/appium_cache", "a.apk\n", "", 0},
		{"ls /data/local/tmp/nope", "", "ls: /data/local/tmp/nope: No such file or directory\n", 1},
		{"ls -l /data/local/tmp/appium_cache/a.apk", "-rw-rw-rw- 1 shell shell 0 2024-05-06 07:08 /data/local/tmp/appium_cache/a.apk\n", "", 0},
		{"rm /data/local/tmp/appium_cache", "", "rm: /data/local/tmp/appium_cache: is a directory\n", 1},
		{"rm -rf /data/local/tmp/appium_cache && ls /data/local/tmp", "", "", 0},
		{"rm -f /data/local/tmp/none", "", "", 0},
		{"rm /data/local/tmp/none", "", "rm: /data/local/tmp/none: No such file or directory\n", 1},
		{"cat /data/local/tmp/none", "", "cat: /data/local/tmp/none: No such file or directory\n", 1},
		{"rm -rf /system/bin", "", "rm: /system/bin: Read-only file system\n", 1},
	}
	for _, tc := range tests {
		out, e, st := sh(t, d, tc.cmd)
		if out != tc.out || e != tc.err || st != tc.status {
			t.Errorf("%s\n got (%q, %q, %d)\nwant (%q, %q, %d)", tc.cmd, out, e, st, tc.out, tc.err, tc.status)
		}
	}
}
