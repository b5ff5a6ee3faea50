package android

import (
	"bytes"
	"context"
	"testing"
)

func TestZZSmoke(t *testing.T) {
	d, err := New(Profile{}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"getprop ro.product.device", "echo hi | grep h && echo ok || echo no", "foo", "ls -l /data/local/tmp", "echo abc > /data/local/tmp/x; cat /data/local/tmp/x; ls -l /data/local/tmp", "id", "service list | head", "cmd package list packages -3", "pm list packages | grep -c package", "dumpsys foo", "cmd foo", "wm size; wm density", "settings get global nope", "echo $?; false; echo $?", "sh -c 'echo \"a b\"' 2>&1", "ls /data", "echo x > /system/y", "dumpsys deviceidle whitelist +com.android.chrome", "ls /sdcard/"} {
		var o, e bytes.Buffer
		st := d.Shell(context.Background(), cmd, nil, &o, &e)
		t.Logf("$ %s\n[%d] out=%q err=%q", cmd, st, o.String(), e.String())
	}
}
