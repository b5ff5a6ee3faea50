package uia2

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/screengraph/screengraph-agent/emulator/sim/android"
)

// node is one element of a hierarchy snapshot, with the attributes the real
// UiElementSnapshot collects, in the order it writes them.
type node struct {
	el       *android.Element // the device's element (nil for the hierarchy root)
	path     []int            // child indexes from the window root
	tag      string
	attrs    []attr
	children []*node
	index    int // position in the snapshot's pre-order list
}

type attr struct{ name, value string }

func (n *node) get(name string) (string, bool) {
	for _, a := range n.attrs {
		if a.name == name {
			return a.value, true
		}
	}
	return "", false
}

// snapshot is one dump of the foreground window.
type snapshot struct {
	pkg, activity string
	width, height int
	root          *node   // the <hierarchy> node
	nodes         []*node // pre-order, root first
}

// boolStr is Java's Boolean.toString.
func boolStr(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

// takeSnapshot builds the hierarchy the real server would dump for the foreground
// window. Attributes follow UiElementSnapshot.SUPPORTED_ATTRIBUTES of v10.6.6:
// index, package, class, text, [original-text], [content-desc], [resource-id],
// checkable, checked, clickable, enabled, focusable, focused, long-clickable,
// password, scrollable, [selection-start, selection-end], selected, bounds,
// displayed, [hint], a11y-important (API 24+), screen-reader-focusable (28+),
// [input-type], drawing-order (24+), showing-hint (26+), text-entry-key (29+),
// [multiline], dismissable, a11y-focused, heading (28+), live-region,
// context-clickable (23+), [max-text-length], content-invalid, [error],
// [pane-title], [tooltip-text], [text-has-clickable-span], window-id.
// Bracketed attributes are null (left out) for the views the profile models:
// no editable text, no hint, no error, no tooltip. This matches a real capture
// (fixtures/captures/uiautomator-source/chrome-google-api34.xml) attribute for
// attribute.
func takeSnapshot(pkg, activity string, root *android.Element, w, h, api, windowID int) *snapshot {
	s := &snapshot{pkg: pkg, activity: activity, width: w, height: h}
	s.root = &node{tag: "hierarchy", attrs: []attr{
		{"index", "0"}, {"class", "hierarchy"},
		// addDisplayInfo: written after the root's own attributes.
		{"rotation", "0"}, {"width", strconv.Itoa(w)}, {"height", strconv.Itoa(h)},
	}}
	s.nodes = append(s.nodes, s.root)
	if root != nil {
		s.root.children = []*node{s.add(root, nil, 0, true, pkg, api, windowID)}
	}
	return s
}

func (s *snapshot) add(el *android.Element, parentPath []int, index int, isWindowRoot bool, pkg string, api, windowID int) *node {
	path := append(append([]int(nil), parentPath...), index)
	n := &node{el: el, path: path, tag: xmlNodeName(el.Class), index: len(s.nodes)}
	s.nodes = append(s.nodes, n)
	enabled := el.Enabled == nil || *el.Enabled
	b := el.Bounds
	add := func(name, value string) { n.attrs = append(n.attrs, attr{name, value}) }
	add("index", strconv.Itoa(index))
	add("package", pkg)
	add("class", el.Class)
	// AxNodeInfoHelper.getText never returns null for a plain view: "" when unset.
	add("text", el.Text)
	if el.ContentDesc != "" {
		add("content-desc", el.ContentDesc)
	}
	if el.ResourceID != "" {
		add("resource-id", el.ResourceID)
	}
	add("checkable", "false")
	add("checked", "false")
	add("clickable", boolStr(el.Clickable))
	add("enabled", boolStr(enabled))
	add("focusable", boolStr(el.Focusable))
	add("focused", "false")
	add("long-clickable", "false")
	add("password", "false")
	add("scrollable", "false")
	add("selected", "false")
	add("bounds", fmt.Sprintf("[%d,%d][%d,%d]", b[0], b[1], b[2], b[3]))
	add("displayed", "true")
	if api >= 24 {
		// View.isImportantForAccessibility in AUTO mode: actionable views and views
		// with a description; the window's decor root reports true (real capture).
		add("a11y-important", boolStr(isWindowRoot || el.Clickable || el.Focusable || el.ContentDesc != ""))
	}
	if api >= 28 {
		add("screen-reader-focusable", "false")
	}
	if api >= 24 {
		// Drawing order within the parent: 0 for the window root, views count from 1.
		order := 0
		if !isWindowRoot {
			order = index + 1
		}
		add("drawing-order", strconv.Itoa(order))
	}
	if api >= 26 {
		add("showing-hint", "false")
	}
	if api >= 29 {
		add("text-entry-key", "false")
	}
	add("dismissable", "false")
	add("a11y-focused", "false")
	if api >= 28 {
		add("heading", "false")
	}
	add("live-region", "0")
	if api >= 23 {
		add("context-clickable", "false")
	}
	add("content-invalid", "false")
	add("window-id", strconv.Itoa(windowID))
	for i, c := range el.Children {
		if c == nil {
			continue
		}
		n.children = append(n.children, s.add(c, path, i, false, pkg, api, windowID))
	}
	return n
}

// xmlNodeName is AccessibilityNodeInfoDumper.toXmlNodeName with the default
// settings (normalizeTagNames=false): "$@#&" become dots, runs of dots collapse,
// leading/trailing dots go, and a blank result is android.view.View.
func xmlNodeName(className string) string {
	if strings.TrimSpace(className) == "" {
		return "android.view.View"
	}
	name := strings.Map(func(r rune) rune {
		switch r {
		case '$', '@', '#', '&':
			return '.'
		}
		return r
	}, className)
	for strings.Contains(name, "..") {
		name = strings.ReplaceAll(name, "..", ".")
	}
	name = strings.Trim(name, ".")
	// XMLHelpers.toNodeName: characters not allowed in an XML name become '_'.
	var b strings.Builder
	for i, r := range name {
		if isNameChar(r, i == 0) {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	if b.Len() == 0 {
		return "android.view.View"
	}
	return b.String()
}

func isNameChar(r rune, first bool) bool {
	switch {
	case r == '_' || r == ':' || (r >= 'A' && r <= 'Z') || (r >= 'a' && r <= 'z'):
		return true
	case r >= 0xC0 && r != 0xD7 && r != 0xF7 && r < 0x37E, r >= 0x37F && r < 0x2000, r >= 0x3001 && r < 0xD800:
		return true
	case first:
		return false
	case r == '-' || r == '.' || (r >= '0' && r <= '9') || r == 0xB7:
		return true
	}
	return false
}

// xml writes the snapshot the way the real dumper does: KXmlSerializer with
// startDocument("UTF-8", true) and indent-output. indexed adds the
// uiElementIndex attribute the real server adds for XPath lookups only.
func (s *snapshot) xml(indexed bool) string {
	var b strings.Builder
	b.WriteString("<?xml version='1.0' encoding='UTF-8' standalone='yes' ?>")
	var write func(n *node, depth int)
	write = func(n *node, depth int) {
		b.WriteString("\r\n")
		b.WriteString(strings.Repeat("  ", depth))
		b.WriteByte('<')
		b.WriteString(n.tag)
		for _, a := range n.attrs {
			writeAttr(&b, a.name, a.value)
		}
		if indexed {
			writeAttr(&b, "uiElementIndex", strconv.Itoa(n.index))
		}
		if len(n.children) == 0 {
			b.WriteString(" />")
			return
		}
		b.WriteByte('>')
		for _, c := range n.children {
			write(c, depth+1)
		}
		b.WriteString("\r\n")
		b.WriteString(strings.Repeat("  ", depth))
		b.WriteString("</")
		b.WriteString(n.tag)
		b.WriteByte('>')
	}
	write(s.root, 0)
	return b.String()
}

// writeAttr is KXmlSerializer.attribute: double quotes unless the value has one,
// then single quotes; \n \r \t as character references; & < > escaped; the quote
// character escaped; characters XML forbids become '?' (XMLHelpers.toSafeString
// with NON_XML_CHAR_REPLACEMENT).
func writeAttr(b *strings.Builder, name, value string) {
	q := byte('"')
	if strings.IndexByte(value, '"') >= 0 {
		q = '\''
	}
	b.WriteByte(' ')
	b.WriteString(name)
	b.WriteByte('=')
	b.WriteByte(q)
	for _, r := range value {
		switch {
		case r == '\n' || r == '\r' || r == '\t':
			fmt.Fprintf(b, "&#%d;", r)
		case r == '&':
			b.WriteString("&amp;")
		case r == '>':
			b.WriteString("&gt;")
		case r == '<':
			b.WriteString("&lt;")
		case r == rune(q) && q == '"':
			b.WriteString("&quot;")
		case r == rune(q):
			b.WriteString("&apos;")
		case r == utf8.RuneError, r < 0x20, r >= 0xD800 && r < 0xE000, r == 0xFFFE, r == 0xFFFF:
			b.WriteByte('?')
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte(q)
}
