package uia2

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/screengraph/screengraph-agent/emulator/sim/android"
)

// An installed app whose profile has no screens shows the window of a plain
// Activity (a real ApiDemos dump, see SOURCES.md): DecorView, the action bar
// titled with the manifest's label, an empty android:id/content; every node
// carries the app's package.
func TestPlainActivityWindow(t *testing.T) {
	apk, err := os.ReadFile("../../../fixtures/apks/demo-v1.apk")
	if err != nil {
		t.Fatal(err)
	}
	d, err := android.New(android.Profile{Name: "plain", Preinstalled: []android.Package{{ID: "com.example.app", APKData: apk}}}, android.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := d.Shell(context.Background(), "am start -W -n com.example.app/.DetailsActivity", nil, &out, &errb); code != 0 {
		t.Fatalf("am start: %d %s %s", code, out.String(), errb.String())
	}
	pkg, act, root := d.Foreground()
	if pkg != "com.example.app" || act != "com.example.app.DetailsActivity" || root == nil {
		t.Fatalf("foreground %s/%s root %v", pkg, act, root)
	}
	s := takeSnapshot(pkg, act, root, 1080, 2400, 34, 1)
	type want struct{ class, id, text, bounds string }
	wants := []want{
		{"android.widget.FrameLayout", "", "", "[0,0][1080,2400]"},
		{"android.view.ViewGroup", "android:id/decor_content_parent", "", "[0,0][1080,2337]"},
		{"android.widget.FrameLayout", "android:id/action_bar_container", "", "[0,128][1080,275]"},
		{"android.view.ViewGroup", "android:id/action_bar", "", "[0,128][1080,275]"},
		{"android.widget.TextView", "", "Demo", "[42,166][158,237]"},
		{"android.widget.FrameLayout", "android:id/content", "", "[0,275][1080,2337]"},
	}
	if len(s.nodes) != len(wants)+1 {
		t.Fatalf("%d nodes, want %d", len(s.nodes)-1, len(wants))
	}
	for i, w := range wants {
		n := s.nodes[i+1]
		get := func(k string) string { v, _ := n.get(k); return v }
		if get("class") != w.class || get("resource-id") != w.id || get("text") != w.text || get("bounds") != w.bounds || get("package") != "com.example.app" {
			t.Errorf("node %d: class %q id %q text %q bounds %q package %q; want %+v", i, get("class"), get("resource-id"), get("text"), get("bounds"), get("package"), w)
		}
	}
	var b strings.Builder
	for _, n := range s.nodes[1:] {
		if _, ok := n.get("package"); !ok {
			b.WriteString(n.tag + " ")
		}
	}
	if b.Len() > 0 {
		t.Errorf("nodes without package: %s", b.String())
	}
}
