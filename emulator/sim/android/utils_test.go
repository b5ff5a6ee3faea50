package android

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestUtilityCommands(t *testing.T) {
	d, _ := newTestDevice(t, Profile{})
	d29, _ := newTestDevice(t, Profile{APILevel: 29})
	tests := []struct {
		d                *Device
		cmd, out, errOut string
		status           int
	}{
		{d, "id", "uid=2000(shell) gid=2000(shell) groups=2000(shell),1004(input),1007(log),1011(adb),1015(sdcard_rw),1028(sdcard_r),1078(ext_data_rw),1079(ext_obb_rw),3001(net_bt_admin),3002(net_bt),3003(inet),3006(net_bw_stats),3009(readproc),3011(uhid),3012(readtracefs) context=u:r:shell:s0\n", "", 0},
		{d29, "id", "uid=2000(shell) gid=2000(shell) groups=2000(shell),1004(input),1007(log),1011(adb),1015(sdcard_rw),1028(sdcard_r),3001(net_bt_admin),3002(net_bt),3003(inet),3006(net_bw_stats),3009(readproc),3011(uhid) context=u:r:shell:s0\n", "", 0},
		{d, "whoami", "shell\n", "", 0},
		{d, "getprop ro.build.version.sdk", "34\n", "", 0},
		{d29, "getprop ro.build.version.release", "10\n", "", 0},
		{d, "getprop no.such.prop", "\n", "", 0},
		{d, "setprop debug.x 1 && getprop debug.x", "1\n", "", 0},
		{d, "settings get global no_such_key", "null\n", "", 0},
		{d, "settings put global window_animation_scale 0 && settings get global window_animation_scale", "0\n", "", 0},
		{d, "settings delete global window_animation_scale", "Deleted 1 rows\n", "", 0},
		{d, "settings get secure default_input_method", "com.google.android.inputmethod.latin/com.android.inputmethod.latin.LatinIME\n", "", 0},
		{d, "wm size", "Physical size: 1080x2400\n", "", 0},
		{d, "wm density", "Physical density: 420\n", "", 0},
		{d, "wm size 720x1280 && wm size", "Physical size: 1080x2400\nOverride size: 720x1280\n", "", 0},
		{d, "echo -n a; echo b", "ab\n", "", 0},
		{d, "printf x", "", "/system/bin/sh: printf: inaccessible or not found\n", 127},
		{d, "which pm ls nosuch", "/system/bin/pm\n/system/bin/ls\n", "", 1},
		{d, "echo 'a\nB\nc' | grep -i b", "B\n", "", 0},
		{d, "echo -e 'a\\nb\\nc' | grep -v b", "a\nc\n", "", 0},
		{d, "echo -e 'ab\\ncd' | grep -E 'a|c' -c", "2\n", "", 0},
		{d, "echo 'a.c' | grep -F .", "a.c\n", "", 0},
		{d, "echo abc | grep -q b && echo found", "found\n", "", 0},
		{d, "echo 'x(y' | grep 'x(y'", "x(y\n", "", 0},
		{d, "appops set com.android.chrome RUN_IN_BACKGROUND allow", "", "", 0},
		{d, "dumpsys deviceidle whitelist +com.android.chrome", "Added: com.android.chrome\n", "", 0},
		{d, "service check activity", "Service activity: found\n", "", 0},
		{d, "service check nosuch", "Service nosuch: not found\n", "", 0},
		{d, "sleep 0.01 && echo slept", "slept\n", "", 0},
	}
	for _, tc := range tests {
		out, e, st := sh(t, tc.d, tc.cmd)
		if out != tc.out || e != tc.errOut || st != tc.status {
			t.Errorf("%s\n got (%q, %q, %d)\nwant (%q, %q, %d)", tc.cmd, out, e, st, tc.out, tc.errOut, tc.status)
		}
	}
}

func TestGetpropAllAndServiceList(t *testing.T) {
	d, _ := newTestDevice(t, Profile{Props: map[string]string{"persist.sys.locale": "en-US"}})
	out, _, _ := sh(t, d, "getprop")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	line := regexp.MustCompile(`^\[[^\]]+\]: \[.*\]$`)
	prev := ""
	for _, l := range lines {
		if !line.MatchString(l) {
			t.Fatalf("getprop line %q not in the [key]: [value] form", l)
		}
		key := l[1:strings.Index(l, "]")]
		if key < prev {
			t.Errorf("getprop not sorted by key at %q", l)
		}
		prev = key
	}
	for _, want := range []string{"[sys.boot_completed]: [1]", "[init.svc.bootanim]: [stopped]", "[persist.sys.locale]: [en-US]", "[ro.product.model]: [sdk_gphone64_x86_64]"} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("getprop lacks %s", want)
		}
	}
	out, _, _ = sh(t, d, "service list")
	ls := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if ls[0] != "Found "+itoa(len(ls)-1)+" services:" {
		t.Errorf("header %q for %d lines", ls[0], len(ls)-1)
	}
	for _, want := range []string{"\tactivity: [android.app.IActivityManager]", "\tpackage: [android.content.pm.IPackageManager]", "\twindow: [android.view.IWindowManager]", "\tbattery: []"} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("service list lacks %q", want)
		}
	}
	capture, err := os.ReadFile(filepath.Join(repoRoot(t), "fixtures/captures/service-list/api33-emulator.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if out != string(capture) {
		t.Errorf("service list after boot differs from the API 33 capture")
	}
}

func TestLogcatBlocksUntilCancelled(t *testing.T) {
	d, _ := newTestDevice(t, Profile{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	go func() { done <- d.Shell(ctx, "logcat -v threadtime", nil, nil, nil) }()
	select {
	case <-done:
		t.Fatal("logcat returned before its stream closed")
	case <-time.After(50 * time.Millisecond):
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("logcat did not stop")
	}
}
