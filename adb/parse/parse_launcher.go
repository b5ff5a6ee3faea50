package parse

import (
	"regexp"
	"strings"
)

// ParseResolveActivity reads `cmd package resolve-activity --brief` output: a
// match line ("priority=0 preferredOrder=0 match=0x108000 …") then the
// component ("com.example.app/.HomeActivity"); the last component line wins.
func ParseResolveActivity(out string) (Component, bool) {
	var c Component
	found := false
	for _, l := range strings.Split(out, "\n") {
		t := strings.TrimSpace(l)
		if strings.Contains(t, "=") || t == "" {
			continue
		}
		if x, ok := ParseComponent(t); ok {
			c, found = x, true
		}
	}
	return c, found
}

var resolverEntryRe = regexp.MustCompile(`^\s+[0-9a-f]+ (\S+/\S+) filter [0-9a-f]+`)

// ParseLauncherActivity finds pkg's activity with Action
// "android.intent.action.MAIN" and Category "android.intent.category.LAUNCHER"
// in the Activity Resolver Table of `dumpsys package PKG` ("      797c103
// com.example.foodies/.MainActivity filter 3be4880" then its Action:/Category:
// lines).
func ParseLauncherActivity(out, pkg string) (Component, bool) {
	var cur Component
	var main, launcher bool
	flush := func() (Component, bool) {
		if !cur.IsZero() && cur.Package == pkg && main && launcher {
			return cur, true
		}
		return Component{}, false
	}
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimRight(l, "\r")
		if strings.HasPrefix(l, "Activity Resolver Table:") || (l != "" && l[0] != ' ' && !cur.IsZero()) {
			if c, ok := flush(); ok {
				return c, true
			}
			cur, main, launcher = Component{}, false, false
			continue
		}
		if m := resolverEntryRe.FindStringSubmatch(l); m != nil {
			if c, ok := flush(); ok {
				return c, true
			}
			cur, _ = ParseComponent(m[1])
			main, launcher = false, false
			continue
		}
		t := strings.TrimSpace(l)
		switch t {
		case `Action: "android.intent.action.MAIN"`:
			main = true
		case `Category: "android.intent.category.LAUNCHER"`:
			launcher = true
		}
	}
	return flush()
}
