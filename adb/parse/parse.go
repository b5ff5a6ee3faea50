package parse

import (
	"regexp"
	"strconv"
	"strings"
)

// Component is an activity component "package/activity". Activity is always fully
// qualified: a leading "." (short form "pkg/.Main") is expanded with the package.
type Component struct {
	Package  string
	Activity string
}

// String returns "package/activity" in the full form.
func (c Component) String() string {
	if c.Package == "" {
		return ""
	}
	return c.Package + "/" + c.Activity
}

// IsZero reports an empty component.
func (c Component) IsZero() bool { return c.Package == "" && c.Activity == "" }

// ParseComponent parses "pkg/act" or "pkg/.act" (ComponentName.flattenToShortString
// form). It returns false when s has no '/' or an empty package.
func ParseComponent(s string) (Component, bool) {
	pkg, act, ok := strings.Cut(strings.TrimSpace(s), "/")
	act = strings.TrimRight(act, "}")
	// Package names never start with '.', and neither part holds blanks or braces.
	if !ok || pkg == "" || act == "" || act == "." || pkg[0] == '.' ||
		strings.ContainsAny(pkg, " \t\r\n{}") || strings.ContainsAny(act, " \t\r\n{}") {
		return Component{}, false
	}
	if strings.HasPrefix(act, ".") {
		act = pkg + act
	}
	return Component{Package: pkg, Activity: act}, true
}

// lines splits s into lines without their "\r".
func lines(s string) []string {
	ls := strings.Split(s, "\n")
	for i, l := range ls {
		ls[i] = strings.TrimRight(l, "\r")
	}
	return ls
}

// recordRe matches the component inside "ActivityRecord{hash u0 pkg/act t12}" and
// "Window{hash u0 pkg/act}"; the user token is any "uN" (work profiles: u10).
var recordRe = regexp.MustCompile(`\{[0-9a-f]+ (?:u\d+ )?([^\s{}/]+/[^\s{}]+)`)

// componentInRecord returns the component of the first ActivityRecord{…}/Window{…}
// in s.
func componentInRecord(s string) (Component, bool) {
	m := recordRe.FindStringSubmatch(s)
	if m == nil {
		return Component{}, false
	}
	return ParseComponent(m[1])
}

func atoi64(s string) (int64, bool) {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	return n, err == nil
}
