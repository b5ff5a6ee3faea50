package android

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestTextTools(t *testing.T) {
	d, err := New(Profile{Name: "t"}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	run := func(cmd string) (string, int) {
		var out, errb bytes.Buffer
		code := d.Shell(context.Background(), cmd, strings.NewReader(""), &out, &errb)
		return out.String() + errb.String(), code
	}
	cases := []struct {
		cmd, want string
		code      int
	}{
		{"echo a; echo b; echo c", "a\nb\nc\n", 0},
		{"sh -c 'echo a; echo b; echo c' | head -n 2", "a\nb\n", 0},
		{"echo a > /data/local/tmp/g; echo b >> /data/local/tmp/g; tail -n 1 /data/local/tmp/g", "b\n", 0},
		{"echo a > /data/local/tmp/h; echo b >> /data/local/tmp/h; head -1 /data/local/tmp/h", "a\n", 0},
		{"echo 'one two' | wc -l", "1\n", 0},
		{"echo 'one two' | wc -w", "2\n", 0},
		{"echo hello > /data/local/tmp/s; sha256sum /data/local/tmp/s", "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03  /data/local/tmp/s\n", 0},
		{"head /nonexistent", "head: /nonexistent: No such file or directory\n", 1},
		{"uname -r", "5.15.119-android13-8-00034-gd34029c8258b-ab10871489\n", 0},
	}
	for _, c := range cases {
		got, code := run(c.cmd)
		if got != c.want || code != c.code {
			t.Errorf("%s: got %q exit %d, want %q exit %d", c.cmd, got, code, c.want, c.code)
		}
	}
}

func TestHomeScreenListsLaunchableApps(t *testing.T) {
	d, err := New(Profile{Name: "t", Preinstalled: []Package{{ID: "com.example.app", VersionCode: 1}},
		Apps: []App{{Package: "com.example.app", LauncherActivity: "com.example.app.Home", Activities: []Activity{{Name: "com.example.app.Home"}}}}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	pkg, _, root := d.Foreground()
	if pkg != homePackage || root == nil || len(root.Children) != 1 {
		t.Fatalf("home: %s %+v", pkg, root)
	}
	var labels []string
	for _, c := range root.Children[0].Children {
		labels = append(labels, c.ContentDesc)
	}
	if strings.Join(labels, ",") != "App" {
		t.Fatalf("home icons %v, want [App]", labels)
	}
}
