package uia2

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/antchfx/xmlquery"
	"github.com/antchfx/xpath"
)

// W3C and JSONWP element keys (ElementConstants).
const (
	w3cElementKey = "element-6066-11e4-a52e-4f735466cecf"
	jwpElementKey = "ELEMENT"
)

// elementModel is model/api/ElementModel.
func elementModel(id string) map[string]string {
	return map[string]string{jwpElementKey: id, w3cElementKey: id}
}

type findModel struct {
	Strategy string `json:"strategy"`
	Selector string `json:"selector"`
	Context  string `json:"context"`
}

// strategies are ElementsLookupStrategy's names, in its declaration order.
var strategies = []string{"id", "accessibility id", "class name", "xpath", "-android uiautomator"}

func (s *server) findElement(q *request) (any, error) {
	ids, err := s.find(q, false)
	if err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, errNoSuchElement("")
	}
	return elementModel(ids[0]), nil
}

func (s *server) findElements(q *request) (any, error) {
	ids, err := s.find(q, true)
	if err != nil {
		return nil, err
	}
	out := make([]map[string]string, 0, len(ids))
	for _, id := range ids {
		out = append(out, elementModel(id))
	}
	return out, nil
}

// find runs a lookup on a fresh snapshot and returns element ids, in document order.
func (s *server) find(q *request, multiple bool) ([]string, error) {
	var m findModel
	if err := json.Unmarshal(q.body, &m); err != nil {
		return nil, errInvalidArgument(err.Error())
	}
	if !slices.Contains(strategies, m.Strategy) {
		return nil, errInvalidSelector(fmt.Sprintf(
			"Selector strategy '%s' is not supported. Only the following selector strategies are supported: [%s]",
			m.Strategy, strings.Join(strategies, ", ")))
	}
	snap := s.snapshot()
	var scope *node
	if m.Context != "" {
		n, err := s.resolve(snap, m.Context)
		if err != nil {
			return nil, err
		}
		scope = n
	}
	var matched []*node
	var err error
	switch m.Strategy {
	case "id":
		loc := m.Selector
		// ElementLocationHelpers.rewriteIdLocator: a bare id gets the current package.
		if !strings.Contains(loc, ":id/") && snap.pkg != "" {
			loc = snap.pkg + ":id/" + loc
		}
		matched = filterNodes(snap, scope, func(n *node) bool { return n.el.ResourceID == loc })
	case "accessibility id":
		matched = filterNodes(snap, scope, func(n *node) bool { return n.el.ContentDesc == m.Selector })
	case "class name":
		matched = filterNodes(snap, scope, func(n *node) bool { return n.el.Class == m.Selector })
	case "xpath":
		matched, err = xpathNodes(snap, scope, m.Selector)
	case "-android uiautomator":
		matched, err = uiSelectorNodes(snap, scope, m.Selector)
	}
	if err != nil {
		return nil, err
	}
	if !multiple && len(matched) > 1 {
		matched = matched[:1]
	}
	ids := make([]string, 0, len(matched))
	for _, n := range matched {
		ids = append(ids, s.remember(snap, n))
	}
	return ids, nil
}

// filterNodes returns the view nodes (not the hierarchy root) that pass keep, in
// pre-order; with a scope, only its descendants.
func filterNodes(snap *snapshot, scope *node, keep func(*node) bool) []*node {
	var out []*node
	for _, n := range snap.nodes {
		if n.el == nil || (scope != nil && !isDescendant(n, scope)) {
			continue
		}
		if keep(n) {
			out = append(out, n)
		}
	}
	return out
}

func isDescendant(n, anc *node) bool {
	return len(n.path) > len(anc.path) && slices.Equal(n.path[:len(anc.path)], anc.path)
}

// xpathNodes evaluates an XPath 1.0 expression over the indexed dump, as
// AccessibilityNodeInfoDumper.findNodesUsingXpath1 does (the context is the
// document, or the context element's node).
func xpathNodes(snap *snapshot, scope *node, expr string) ([]*node, error) {
	compiled, err := xpath.Compile(expr)
	if err != nil {
		return nil, errInvalidSelector(fmt.Sprintf("Unable to compile '%s': %v", expr, err))
	}
	doc, err := xmlquery.Parse(strings.NewReader(snap.xml(true)))
	if err != nil {
		return nil, errUnknown(err.Error())
	}
	var ctx *xmlquery.Node = doc
	if scope != nil {
		ctx = xmlquery.FindOne(doc, fmt.Sprintf("//*[@uiElementIndex='%d']", scope.index))
		if ctx == nil {
			return nil, errUnknown("Cannot match the root element for the context-based XPath lookup")
		}
	}
	var out []*node
	for _, x := range xmlquery.QuerySelectorAll(ctx, compiled) {
		if x.Type != xmlquery.ElementNode {
			continue
		}
		i, err := strconv.Atoi(x.SelectAttr("uiElementIndex"))
		if err != nil || i <= 0 || i >= len(snap.nodes) {
			continue // the hierarchy root maps to no view
		}
		out = append(out, snap.nodes[i])
	}
	return out, nil
}

var uiSelectorCall = regexp.MustCompile(`\.\s*(\w+)\s*\(\s*("(?:[^"\\]|\\.)*"|true|false|-?\d+)?\s*\)`)

// uiSelectorNodes supports the common subset of UiSelector chains:
// new UiSelector().resourceId("…").text("…").textContains/StartsWith/Matches,
// description/descriptionContains/descriptionMatches, className/classNameMatches,
// clickable/enabled/focusable(bool), instance(n), index(n).
func uiSelectorNodes(snap *snapshot, scope *node, sel string) ([]*node, error) {
	rest := strings.TrimSpace(sel)
	rest = strings.TrimSuffix(rest, ";")
	if !strings.HasPrefix(rest, "new UiSelector()") {
		return nil, errInvalidSelector(fmt.Sprintf("Could not parse selector expression `%s`", sel))
	}
	rest = rest[len("new UiSelector()"):]
	type pred func(*node) bool
	var preds []pred
	instance := -1
	for strings.TrimSpace(rest) != "" {
		m := uiSelectorCall.FindStringSubmatchIndex(rest)
		if m == nil || strings.TrimSpace(rest[:m[0]]) != "" {
			return nil, errInvalidSelector(fmt.Sprintf("Could not parse selector expression `%s`", sel))
		}
		name := rest[m[2]:m[3]]
		arg := ""
		if m[4] >= 0 {
			arg = rest[m[4]:m[5]]
		}
		rest = rest[m[1]:]
		str, isStr := "", strings.HasPrefix(arg, `"`)
		if isStr {
			u, err := strconv.Unquote(arg)
			if err != nil {
				return nil, errInvalidSelector(err.Error())
			}
			str = u
		}
		needStr := func() error {
			if !isStr {
				return errInvalidSelector(fmt.Sprintf("%s() expects a string argument in `%s`", name, sel))
			}
			return nil
		}
		switch name {
		case "resourceId", "text", "textContains", "textStartsWith", "description", "descriptionContains", "className":
			if err := needStr(); err != nil {
				return nil, err
			}
			field := map[string]func(*node) string{
				"resourceId": func(n *node) string { return n.el.ResourceID },
				"text":       func(n *node) string { return n.el.Text }, "textContains": func(n *node) string { return n.el.Text },
				"textStartsWith": func(n *node) string { return n.el.Text },
				"description":    func(n *node) string { return n.el.ContentDesc }, "descriptionContains": func(n *node) string { return n.el.ContentDesc },
				"className": func(n *node) string { return n.el.Class },
			}[name]
			v := str
			switch {
			case strings.HasSuffix(name, "Contains"):
				preds = append(preds, func(n *node) bool { return strings.Contains(field(n), v) })
			case strings.HasSuffix(name, "StartsWith"):
				preds = append(preds, func(n *node) bool { return strings.HasPrefix(field(n), v) })
			default:
				preds = append(preds, func(n *node) bool { return field(n) == v })
			}
		case "resourceIdMatches", "textMatches", "descriptionMatches", "classNameMatches":
			if err := needStr(); err != nil {
				return nil, err
			}
			re, err := regexp.Compile("^(?:" + str + ")$")
			if err != nil {
				return nil, errInvalidSelector(err.Error())
			}
			get := map[string]func(*node) string{
				"resourceIdMatches":  func(n *node) string { return n.el.ResourceID },
				"textMatches":        func(n *node) string { return n.el.Text },
				"descriptionMatches": func(n *node) string { return n.el.ContentDesc },
				"classNameMatches":   func(n *node) string { return n.el.Class },
			}[name]
			preds = append(preds, func(n *node) bool { return re.MatchString(get(n)) })
		case "clickable", "enabled", "focusable":
			want := arg != "false"
			get := map[string]func(*node) bool{
				"clickable": func(n *node) bool { return n.el.Clickable },
				"enabled":   func(n *node) bool { return n.el.Enabled == nil || *n.el.Enabled },
				"focusable": func(n *node) bool { return n.el.Focusable },
			}[name]
			preds = append(preds, func(n *node) bool { return get(n) == want })
		case "instance", "index":
			k, err := strconv.Atoi(arg)
			if err != nil {
				return nil, errInvalidSelector(fmt.Sprintf("%s() expects an integer argument in `%s`", name, sel))
			}
			if name == "instance" {
				instance = k
			} else {
				preds = append(preds, func(n *node) bool { return n.path[len(n.path)-1] == k })
			}
		default:
			return nil, errInvalidSelector(fmt.Sprintf("UiSelector has no supported method '%s' in `%s`", name, sel))
		}
	}
	out := filterNodes(snap, scope, func(n *node) bool {
		for _, p := range preds {
			if !p(n) {
				return false
			}
		}
		return true
	})
	if instance >= 0 {
		if instance >= len(out) {
			return nil, nil
		}
		out = out[instance : instance+1]
	}
	return out, nil
}

// remember returns the element id of n, reusing the id given earlier to the same
// view so that ids are stable within one screen.
func (s *server) remember(snap *snapshot, n *node) string {
	ref := elemRef{pkg: snap.pkg, activity: snap.activity, path: n.path,
		class: n.el.Class, resID: n.el.ResourceID, bounds: n.el.Bounds}
	s.mu.Lock()
	defer s.mu.Unlock()
	if id, ok := s.sess.byKey[ref.key()]; ok {
		if old := s.sess.elements[id]; old.class == ref.class && old.resID == ref.resID && old.bounds == ref.bounds {
			return id
		}
	}
	id := newUUID()
	s.sess.elements[id] = ref
	s.sess.byKey[ref.key()] = id
	return id
}

// resolve finds the node of a cached element id in snap (ElementsCache.get).
func (s *server) resolve(snap *snapshot, id string) (*node, error) {
	s.mu.Lock()
	ref, ok := s.sess.elements[id]
	s.mu.Unlock()
	if !ok {
		return nil, errNoSuchElement(fmt.Sprintf(
			"The element identified by '%s' is not present in the cache or has expired. Try to find it again", id))
	}
	stale := errStale(fmt.Sprintf("The element '%s' does not exist in DOM anymore", id))
	if ref.pkg != snap.pkg || ref.activity != snap.activity {
		return nil, stale
	}
	for _, n := range snap.nodes {
		if n.el != nil && slices.Equal(n.path, ref.path) {
			if n.el.Class != ref.class || n.el.ResourceID != ref.resID || n.el.Bounds != ref.bounds {
				return nil, stale
			}
			return n, nil
		}
	}
	return nil, stale
}
