package uia2

import (
	"bytes"
	"context"
	"io"
	"os"
	"regexp"
	"slices"
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

var plainNodeRE = regexp.MustCompile(`class="([^"]+)"(?: text="([^"]*)")?(?: resource-id="([^"]*)")?(?: text="([^"]*)")? bounds="([^"]+)"`)

// The window of a plain activity titled "API Demos" equals, node for node
// (class, resource-id, text, bounds), the real dump of ApiDemos' main
// activity on a 1080x2400 420 dpi emulator, down to android:id/content.
func TestPlainActivityWindowMatchesCapture(t *testing.T) {
	b, err := os.ReadFile("../../../fixtures/captures/uiautomator-source/apidemos-main-1080x2400-trimmed.xml")
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, m := range plainNodeRE.FindAllStringSubmatch(string(b), -1) {
		want = append(want, strings.Join([]string{m[1], m[3], m[2] + m[4], m[5]}, " "))
	}
	if len(want) != 6 {
		t.Fatalf("read %d nodes from the capture, want 6: %q", len(want), want)
	}
	apk, _ := os.ReadFile("../../../fixtures/apks/demo-v1.apk")
	d, err := android.New(android.Profile{Name: "plain", Preinstalled: []android.Package{{ID: "com.example.app", APKData: apk}},
		Apps: []android.App{{Package: "com.example.app", LauncherActivity: "com.example.app.HomeActivity",
			Activities: []android.Activity{{Name: "com.example.app.HomeActivity", Label: "API Demos"}}}}}, android.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if code := d.Shell(context.Background(), "am start -n com.example.app/.HomeActivity", nil, io.Discard, io.Discard); code != 0 {
		t.Fatalf("am start: exit %d", code)
	}
	pkg, act, root := d.Foreground()
	s := takeSnapshot(pkg, act, root, 1080, 2400, 34, 1)
	var got []string
	for _, n := range s.nodes[1:] {
		get := func(k string) string { v, _ := n.get(k); return v }
		got = append(got, strings.Join([]string{get("class"), get("resource-id"), get("text"), get("bounds")}, " "))
	}
	if !slices.Equal(got, want) {
		t.Errorf("plain activity window\n got %q\nwant %q", got, want)
	}
}
