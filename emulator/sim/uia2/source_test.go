package uia2

import (
	"encoding/xml"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/screengraph/screengraph-agent/emulator/sim/android"
)

var attrNameRE = regexp.MustCompile(`\s([a-zA-Z0-9-]+)="`)

func attrNames(line string) []string {
	var out []string
	for _, m := range attrNameRE.FindAllStringSubmatch(line, -1) {
		out = append(out, m[1])
	}
	return out
}

// The attribute set and order of a real API 29+ dump (v10.x server): compare the
// capture's android:id/content node with ours for a node of the same kind (text
// set, resource-id set, no content-desc).
func TestSourceAttributesMatchRealCapture(t *testing.T) {
	b, err := os.ReadFile("../../../fixtures/captures/uiautomator-source/chrome-google-head.xml")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	if lines[0] != "<?xml version='1.0' encoding='UTF-8' standalone='yes' ?>" {
		t.Fatalf("capture declaration %q", lines[0])
	}
	var realContent, realRoot, realHierarchy string
	for _, l := range lines {
		switch {
		case strings.Contains(l, `resource-id="android:id/content"`):
			realContent = l
		case strings.HasPrefix(strings.TrimSpace(l), "<hierarchy"):
			realHierarchy = l
		case realRoot == "" && strings.HasPrefix(strings.TrimSpace(l), "<android."):
			realRoot = l
		}
	}
	root := &android.Element{Class: "android.widget.FrameLayout", Bounds: [4]int{0, 0, 1080, 2340},
		Children: []*android.Element{{Class: "android.widget.FrameLayout", ResourceID: "android:id/content", Bounds: [4]int{0, 0, 1080, 2340}}}}
	snap := takeSnapshot("com.android.chrome", "org.chromium.chrome.browser.ChromeTabbedActivity", root, 1080, 2340, 34, 780)
	got := strings.Split(snap.xml(false), "\r\n")
	if len(got) != 6 {
		t.Fatalf("dump has %d lines: %q", len(got), got)
	}
	if got[1] != strings.TrimRight(realHierarchy, "\r") {
		t.Errorf("hierarchy line\n got %s\nwant %s", got[1], realHierarchy)
	}
	if !slices.Equal(attrNames(got[2]), attrNames(realRoot)) {
		t.Errorf("window root attributes\n got %v\nwant %v", attrNames(got[2]), attrNames(realRoot))
	}
	if !slices.Equal(attrNames(got[3]), attrNames(realContent)) {
		t.Errorf("content node attributes\n got %v\nwant %v", attrNames(got[3]), attrNames(realContent))
	}
	// The window root line of the capture is reproduced byte for byte (same
	// package, bounds, a11y-important, drawing-order and window id).
	if got[2] != strings.TrimSuffix(realRoot, "\r") {
		t.Errorf("window root line\n got %s\nwant %s", got[2], realRoot)
	}
}

func TestSourceExactFormat(t *testing.T) {
	enabled := false
	root := &android.Element{Class: "android.widget.FrameLayout", Bounds: [4]int{0, 0, 100, 200},
		Children: []*android.Element{
			{Class: "android.widget.Button", Text: `Say "hi" & <bye>`, ContentDesc: "line1\nline2", Clickable: true, Enabled: &enabled, Bounds: [4]int{1, 2, 3, 4}},
			{Class: "", Text: "it's", Bounds: [4]int{5, 6, 7, 8}},
			{Class: "com.example.Outer$Inner", Bounds: [4]int{0, 0, 1, 1}},
		}}
	got := takeSnapshot("p", "p.A", root, 100, 200, 34, 7).xml(false)
	common := ` checkable="false" checked="false" clickable="%s" enabled="%s" focusable="false" focused="false" long-clickable="false" password="false" scrollable="false" selected="false" bounds="%s" displayed="true" a11y-important="%s" screen-reader-focusable="false" drawing-order="%s" showing-hint="false" text-entry-key="false" dismissable="false" a11y-focused="false" heading="false" live-region="0" context-clickable="false" content-invalid="false" window-id="7"`
	f := func(clickable, enabled, bounds, important, order string) string {
		s := common
		for _, v := range []string{clickable, enabled, bounds, important, order} {
			s = strings.Replace(s, "%s", v, 1)
		}
		return s
	}
	want := "<?xml version='1.0' encoding='UTF-8' standalone='yes' ?>\r\n" +
		`<hierarchy index="0" class="hierarchy" rotation="0" width="100" height="200">` + "\r\n" +
		`  <android.widget.FrameLayout index="0" package="p" class="android.widget.FrameLayout" text=""` + f("false", "true", "[0,0][100,200]", "true", "0") + ">\r\n" +
		`    <android.widget.Button index="0" package="p" class="android.widget.Button" text='Say "hi" &amp; &lt;bye&gt;' content-desc="line1&#10;line2"` + f("true", "false", "[1,2][3,4]", "true", "1") + " />\r\n" +
		`    <android.view.View index="1" package="p" class="" text="it's"` + f("false", "true", "[5,6][7,8]", "false", "2") + " />\r\n" +
		`    <com.example.Outer.Inner index="2" package="p" class="com.example.Outer$Inner" text=""` + f("false", "true", "[0,0][1,1]", "false", "3") + " />\r\n" +
		"  </android.widget.FrameLayout>\r\n" +
		"</hierarchy>"
	if got != want {
		t.Fatalf("dump\n got %q\nwant %q", got, want)
	}
	// It is well-formed XML that a standard parser reads back.
	var doc struct {
		XMLName xml.Name
		Width   string `xml:"width,attr"`
	}
	if err := xml.Unmarshal([]byte(got), &doc); err != nil || doc.XMLName.Local != "hierarchy" || doc.Width != "100" {
		t.Fatalf("parse: %v %+v", err, doc)
	}
}

func TestSourceAttributesFollowAPILevel(t *testing.T) {
	root := &android.Element{Class: "android.view.View", Bounds: [4]int{0, 0, 1, 1}}
	for api, want := range map[int][]string{
		34: {"a11y-important", "screen-reader-focusable", "drawing-order", "showing-hint", "text-entry-key", "heading", "context-clickable"},
		28: {"a11y-important", "screen-reader-focusable", "drawing-order", "showing-hint", "heading", "context-clickable"},
		26: {"a11y-important", "drawing-order", "showing-hint", "context-clickable"},
	} {
		names := attrNames(strings.Split(takeSnapshot("p", "p.A", root, 1, 1, api, 1).xml(false), "\r\n")[2])
		gated := []string{"a11y-important", "screen-reader-focusable", "drawing-order", "showing-hint", "text-entry-key", "heading", "context-clickable"}
		var have []string
		for _, n := range names {
			if slices.Contains(gated, n) {
				have = append(have, n)
			}
		}
		if !slices.Equal(have, want) {
			t.Errorf("API %d: gated attributes %v, want %v", api, have, want)
		}
	}
}

func TestSourceWithoutWindow(t *testing.T) {
	got := takeSnapshot("", "", nil, 1080, 2400, 34, 1).xml(false)
	want := "<?xml version='1.0' encoding='UTF-8' standalone='yes' ?>\r\n" +
		`<hierarchy index="0" class="hierarchy" rotation="0" width="1080" height="2400" />`
	if got != want {
		t.Fatalf("got %q", got)
	}
}
