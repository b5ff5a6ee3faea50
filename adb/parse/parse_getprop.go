package parse

import (
	"regexp"
	"strconv"
	"strings"
)

// getpropRe matches one "[key]: [value]" line of `getprop` (all properties).
var getpropRe = regexp.MustCompile(`^\[([^\]]+)\]: \[(.*)\]$`)

// ParseGetprop parses the full `getprop` listing ("[ro.build.version.sdk]: [34]"
// per line). A value spanning several lines (rare, e.g. some OEM fingerprints) is
// joined with "\n". Lines that are neither are ignored.
func ParseGetprop(out string) map[string]string {
	props := map[string]string{}
	var openKey string
	var openVal []string
	for _, l := range lines(out) {
		if openKey != "" {
			if strings.HasSuffix(l, "]") {
				openVal = append(openVal, strings.TrimSuffix(l, "]"))
				props[openKey] = strings.Join(openVal, "\n")
				openKey, openVal = "", nil
			} else {
				openVal = append(openVal, l)
			}
			continue
		}
		if m := getpropRe.FindStringSubmatch(l); m != nil {
			props[m[1]] = m[2]
			continue
		}
		if k, v, ok := strings.Cut(l, "]: ["); ok && strings.HasPrefix(k, "[") {
			openKey, openVal = k[1:], []string{v}
		}
	}
	return props
}

// ParseGetpropValue parses `getprop KEY`: the value on one line, "" when unset.
func ParseGetpropValue(out string) string {
	return strings.TrimRight(out, "\r\n")
}

// BootCommand prints dev.bootcomplete, sys.boot_completed and init.svc.bootanim on
// three lines (the bitrise go-android one-shot; a booted device prints "1\n1\nstopped").
const BootCommand = "getprop dev.bootcomplete; getprop sys.boot_completed; getprop init.svc.bootanim"

// BootServices are the system services Appium waits for in `service list` before it
// calls a device ready.
var BootServices = []string{"activity", "package", "window"}

// BootStatus is a device's boot readiness (android-recipes.md "Is the device booted").
type BootStatus struct {
	DevBootComplete  bool   // dev.bootcomplete == 1 (informational: not set on every image)
	SysBootCompleted bool   // sys.boot_completed == 1
	BootAnim         string // init.svc.bootanim: "running", "stopped" or ""
	// MissingServices lists BootServices absent from `service list`; nil when the
	// service list was not given.
	MissingServices []string
	// Ready: sys.boot_completed=1, boot animation stopped (or absent) and no
	// missing service.
	Ready bool
	// Reason says what is still missing when not Ready.
	Reason string
}

// ParseBootStatus parses the output of BootCommand and, when serviceList is not
// empty, the output of `service list`.
func ParseBootStatus(bootOut, serviceList string) BootStatus {
	ls := lines(strings.TrimRight(bootOut, "\r\n"))
	get := func(i int) string {
		if i < len(ls) {
			return strings.TrimSpace(ls[i])
		}
		return ""
	}
	b := BootStatus{DevBootComplete: get(0) == "1", SysBootCompleted: get(1) == "1", BootAnim: get(2)}
	if serviceList != "" {
		have := map[string]bool{}
		for _, s := range ParseServiceList(serviceList) {
			have[s.Name] = true
		}
		for _, want := range BootServices {
			if !have[want] {
				b.MissingServices = append(b.MissingServices, want)
			}
		}
	}
	switch {
	case !b.SysBootCompleted:
		b.Reason = "sys.boot_completed is not 1"
	case b.BootAnim != "" && b.BootAnim != "stopped":
		b.Reason = "boot animation " + b.BootAnim
	case len(b.MissingServices) > 0:
		b.Reason = "services not up: " + strings.Join(b.MissingServices, ",")
	default:
		b.Ready = true
	}
	return b
}

// Service is one line of `service list`: "12\tactivity: [android.app.IActivityManager]".
type Service struct {
	Index     int
	Name      string
	Interface string // "" when the service publishes none ("[]")
}

// ParseServiceList parses `service list` ("Found N services:" then one service per
// line: index, tab, "name: [interface]"; see parseServiceLine).
func ParseServiceList(out string) []Service {
	var svcs []Service
	for _, l := range lines(out) {
		if s, ok := parseServiceLine(strings.TrimSpace(l)); ok {
			svcs = append(svcs, s)
		}
	}
	return svcs
}

// parseServiceLine reads one line of `service list` as the regular expression
// ^(\d+)\s+(\S+?):\s*\[(.*)\]$ would (index, name, interface; \s is RE2's
// [\t\n\f\r ]; the name is the shortest run of non-space bytes before a ':'
// that "\s*[" and a final ']' follow), written out: every EnsureDevice's boot
// check parses the ~200 lines, and the regexp's backtracking there was 4% of
// the daemon's CPU. FuzzServiceLineMatchesRegexp holds the two equal.
func parseServiceLine(l string) (Service, bool) {
	digits, rest, ok := cutServiceIndex(l)
	if !ok {
		return Service{}, false
	}
	name, iface, ok := cutServiceName(rest)
	if !ok {
		return Service{}, false
	}
	n, _ := strconv.Atoi(digits)
	return Service{Index: n, Name: name, Interface: iface}, true
}

// cutServiceIndex splits `^(\d+)\s+` off l: the digits and what follows the
// spaces; ok is false without digits or without a space after them.
func cutServiceIndex(l string) (digits, rest string, ok bool) {
	i := 0
	for i < len(l) && l[i] >= '0' && l[i] <= '9' {
		i++
	}
	j := skipRE2Space(l, i)
	if i == 0 || j == i {
		return "", "", false
	}
	return l[:i], l[j:], true
}

// cutServiceName reads `(\S+?):\s*\[(.*)\]$` from rest: the shortest name
// before a ':' that "\s*[" and a final ']' follow, and the text between the
// brackets.
func cutServiceName(rest string) (name, iface string, ok bool) {
	for k := 0; k < len(rest) && !isRE2Space(rest[k]); k++ {
		if rest[k] != ':' || k == 0 {
			continue
		}
		open := skipRE2Space(rest, k+1)
		if open < len(rest)-1 && rest[open] == '[' && rest[len(rest)-1] == ']' {
			return rest[:k], rest[open+1 : len(rest)-1], true
		}
	}
	return "", "", false
}

// skipRE2Space is the index of the first byte of s at or after i that is
// not RE2's \s (len(s) when none).
func skipRE2Space(s string, i int) int {
	for i < len(s) && isRE2Space(s[i]) {
		i++
	}
	return i
}

// isRE2Space is RE2's \s: [\t\n\f\r ].
func isRE2Space(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\f' || c == '\r'
}
