package uia2

// element resolves the route's element id on a fresh snapshot.
func (s *server) element(q *request) (*node, error) {
	return s.resolve(s.snapshot(), q.params["id"])
}

// click is handler/Click: a tap on the element (view.Click); value null.
func (s *server) click(q *request) (any, error) {
	n, err := s.element(q)
	if err != nil {
		return nil, err
	}
	if err := s.view.Click(n.el); err != nil {
		return nil, errUnknown(err.Error())
	}
	return nil, nil
}

// elementText is handler/GetText: the node's text ("" when unset).
func (s *server) elementText(q *request) (any, error) {
	n, err := s.element(q)
	if err != nil {
		return nil, err
	}
	return n.el.Text, nil
}

// attrAliases maps Attribute's alternative names (utils/Attribute in the APK) to
// the XML attribute name.
var attrAliases = map[string]string{
	"name": "text", "className": "class", "contentDescription": "content-desc",
	"resourceId": "resource-id", "longClickable": "long-clickable",
	"importantForAccessibility": "a11y-important", "screenReaderFocusable": "screen-reader-focusable",
	"drawingOrder": "drawing-order", "showingHintText": "showing-hint", "textEntryKey": "text-entry-key",
	"accessibilityFocused": "a11y-focused", "liveRegion": "live-region", "contextClickable": "context-clickable",
	"contentInvalid": "content-invalid", "windowId": "window-id",
}

// elementAttribute is handler/GetElementAttribute: the attribute as a string, or
// null when the node has no such attribute.
func (s *server) elementAttribute(q *request) (any, error) {
	n, err := s.element(q)
	if err != nil {
		return nil, err
	}
	name := q.params["name"]
	if a, ok := attrAliases[name]; ok {
		name = a
	}
	if v, ok := n.get(name); ok {
		return v, nil
	}
	return nil, nil
}

func (s *server) elementRect(q *request) (any, error) {
	n, err := s.element(q)
	if err != nil {
		return nil, err
	}
	b := n.el.Bounds
	return orderedMap{{"x", b[0]}, {"y", b[1]}, {"width", b[2] - b[0]}, {"height", b[3] - b[1]}}, nil
}

func (s *server) elementLocation(q *request) (any, error) {
	n, err := s.element(q)
	if err != nil {
		return nil, err
	}
	return orderedMap{{"x", n.el.Bounds[0]}, {"y", n.el.Bounds[1]}}, nil
}

func (s *server) elementSize(q *request) (any, error) {
	n, err := s.element(q)
	if err != nil {
		return nil, err
	}
	b := n.el.Bounds
	return orderedMap{{"width", b[2] - b[0]}, {"height", b[3] - b[1]}}, nil
}
