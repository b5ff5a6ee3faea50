package parse

import (
	"regexp"
	"strconv"
	"strings"
)

// ParsePIDs reads `pidof` output ("1234 5678").
func ParsePIDs(out string) []int {
	var ps []int
	for _, f := range strings.Fields(out) {
		if n, err := strconv.Atoi(f); err == nil && n > 0 && len(ps) < 64 {
			ps = append(ps, n)
		}
	}
	return ps
}

// ParseEpochMillis reads `date +%s.%N` output (toybox: epoch seconds, a
// dot, nanoseconds) as epoch milliseconds; a date without %N (printing "N"
// or nothing after the dot) gives whole seconds; 0 when it is not a
// plausible epoch.
func ParseEpochMillis(out string) int64 {
	sec, frac, _ := strings.Cut(strings.TrimSpace(out), ".")
	n, err := strconv.ParseInt(sec, 10, 64)
	if err != nil || n <= 0 || n > 1e11 {
		return 0
	}
	ms := n * 1000
	if len(frac) >= 3 {
		if f, err := strconv.Atoi(frac[:3]); err == nil && f >= 0 {
			ms += int64(f)
		}
	}
	return ms
}

var boundsRe = regexp.MustCompile(`bounds="\[(\d+),(\d+)\]\[(\d+),(\d+)\]"`)

// ElementCenter finds the element with resource-id id in a uiautomator page
// source and returns the centre of its bounds.
func ElementCenter(src, id string) (int, int, bool) {
	i := strings.Index(src, `resource-id="`+id+`"`)
	if i < 0 {
		return 0, 0, false
	}
	start := strings.LastIndexByte(src[:i], '<')
	end := strings.IndexByte(src[i:], '>')
	if start < 0 || end < 0 {
		return 0, 0, false
	}
	m := boundsRe.FindStringSubmatch(src[start : i+end])
	if m == nil {
		return 0, 0, false
	}
	var v [4]int
	for k := range v {
		v[k], _ = strconv.Atoi(m[k+1])
	}
	return (v[0] + v[2]) / 2, (v[1] + v[3]) / 2, true
}
