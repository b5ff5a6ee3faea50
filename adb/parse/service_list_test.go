package parse

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// serviceLineRe is the regular expression ParseServiceList used before
// parseServiceLine: the reference the hand-written reader must equal.
var serviceLineRe = regexp.MustCompile(`^(\d+)\s+(\S+?):\s*\[(.*)\]$`)

func serviceLineByRegexp(l string) (Service, bool) {
	m := serviceLineRe.FindStringSubmatch(l)
	if m == nil {
		return Service{}, false
	}
	n, _ := strconv.Atoi(m[1])
	return Service{Index: n, Name: m[2], Interface: m[3]}, true
}

// FuzzServiceLineMatchesRegexp: parseServiceLine reads every line as the
// regular expression does (the captures and the tricky shapes as seeds).
func FuzzServiceLineMatchesRegexp(f *testing.F) {
	seedCaptures(f, "service-list")
	for _, s := range []string{"0\tDockObserver: []", "1\ta:b:[x]", "2 ::[x]", "3\ta: [x", "4\ta:[]]", "5\t a:\f[\r]",
		"6\ta:[", "7\ta b:[x]", "x\ta:[x]", "8a:[x]", "9\t\xff:[\xfe]", "10\tn:  [a] [b]", "99999999999999999999\tn:[x]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, l := range strings.Split(s, "\n") {
			l = strings.TrimSpace(l)
			got, ok := parseServiceLine(l)
			want, wok := serviceLineByRegexp(l)
			if ok != wok || got != want {
				t.Fatalf("line %q: got %+v %v, the regexp %+v %v", l, got, ok, want, wok)
			}
		}
	})
}

// TestParseServiceListAllocatesLittle: a 200-line `service list` costs about
// one allocation per slice growth, not one per line (the regexp's submatches
// were at least two per line).
func TestParseServiceListAllocatesLittle(t *testing.T) {
	var b strings.Builder
	b.WriteString("Found 200 services:\n")
	for i := range 200 {
		b.WriteString(strconv.Itoa(i) + "\tandroid.hardware.svc" + strconv.Itoa(i) + "/default: [android.hardware.ISvc]\n")
	}
	out := b.String()
	if n := len(ParseServiceList(out)); n != 200 {
		t.Fatalf("%d services, want 200", n)
	}
	if a := testing.AllocsPerRun(20, func() { ParseServiceList(out) }); a > 30 {
		t.Fatalf("ParseServiceList of 200 lines: %.0f allocations, want <= 30", a)
	}
}

// BenchmarkParseServiceList: the real capture's `service list` read line by
// line with the regular expression it used before and with parseServiceLine.
func BenchmarkParseServiceList(b *testing.B) {
	var out string
	for _, rel := range captures(b, "service-list") {
		out = capture(b, rel)
	}
	for _, bc := range []struct {
		name string
		read func(string) (Service, bool)
	}{{"regexp-before", serviceLineByRegexp}, {"reader", parseServiceLine}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				for _, l := range lines(out) {
					bc.read(strings.TrimSpace(l))
				}
			}
		})
	}
}
