package android

import "unicode/utf8"

// plainActivityRoot is the window of an Activity that sets no content of its
// own, under the platform's default theme with an action bar, as UiAutomator
// dumps it on a real device: the DecorView (FrameLayout), the
// ActionBarOverlayLayout (android:id/decor_content_parent, a ViewGroup to
// accessibility) holding the action bar container (FrameLayout
// android:id/action_bar_container) with the Toolbar (ViewGroup
// android:id/action_bar) and its title TextView showing the activity's label,
// then the empty content frame (FrameLayout android:id/content). Classes,
// ids and bounds follow a real dump of ApiDemos' main activity on a 1080x2400
// 420 dpi emulator (see fixtures/captures/SOURCES.md, "Plain activity
// window"): status bar 128 px, action bar 147 px (56 dp), navigation bar 63 px,
// title 42 px (16 dp) from the left, 38 px below the action bar's top, 71 px
// tall. Other densities scale those numbers; the title's width follows its
// length (the capture's 9 characters took 263 px).
func plainActivityRoot(label string, w, h, dpi int) *Element {
	px := func(n int) int { return (n*dpi + 210) / 420 }
	sb, ab, nav := px(128), px(147), px(63)
	titleW := px(263 * utf8.RuneCountInString(label) / 9)
	if left := px(42); left+titleW > w-left {
		titleW = w - 2*left
	}
	title := &Element{Class: "android.widget.TextView", Text: label,
		Bounds: [4]int{px(42), sb + px(38), px(42) + titleW, sb + px(38) + px(71)}}
	bar := &Element{Class: "android.view.ViewGroup", ResourceID: "android:id/action_bar",
		Bounds: [4]int{0, sb, w, sb + ab}, Children: []*Element{title}}
	container := &Element{Class: "android.widget.FrameLayout", ResourceID: "android:id/action_bar_container",
		Bounds: [4]int{0, sb, w, sb + ab}, Children: []*Element{bar}}
	content := &Element{Class: "android.widget.FrameLayout", ResourceID: "android:id/content",
		Bounds: [4]int{0, sb + ab, w, h - nav}}
	overlay := &Element{Class: "android.view.ViewGroup", ResourceID: "android:id/decor_content_parent",
		Bounds: [4]int{0, 0, w, h - nav}, Children: []*Element{container, content}}
	return &Element{Class: "android.widget.FrameLayout", Bounds: [4]int{0, 0, w, h}, Children: []*Element{overlay}}
}
