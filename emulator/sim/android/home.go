package android

import (
	"sort"
	"strings"
)

// homeScreenLocked is the launcher's view hierarchy: the Pixel launcher's
// workspace with one icon (a TextView whose text and content-desc are the app
// label) per installed app that has a launcher activity, four to a row, as a
// uiautomator dump of a Pixel home screen shows them. The label is the last
// segment of the package id, capitalised, since APK labels are not modelled.
func (d *Device) homeScreenLocked() *Element {
	w, h, _ := d.displaySizeLocked()
	var ids []string
	for id, p := range d.pm.pkgs {
		if p.Launcher != "" {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	root := &Element{Class: "android.widget.FrameLayout", Bounds: [4]int{0, 0, w, h}}
	ws := &Element{Class: "android.view.ViewGroup", ResourceID: homePackage + ":id/workspace",
		Bounds: [4]int{0, 0, w, h}, Focusable: true}
	root.Children = []*Element{ws}
	cell := w / 4
	for i, id := range ids {
		seg := id[strings.LastIndexByte(id, '.')+1:]
		label := strings.ToUpper(seg[:1]) + seg[1:]
		x, y := (i%4)*cell, 300+(i/4)*cell
		ws.Children = append(ws.Children, &Element{
			Class: "android.widget.TextView", Text: label, ContentDesc: label,
			Bounds: [4]int{x, y, x + cell, y + cell}, Clickable: true, Focusable: true,
		})
	}
	return root
}
