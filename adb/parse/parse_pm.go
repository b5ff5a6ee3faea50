package parse

import (
	"regexp"
	"slices"
	"strings"
	"time"
)

// PackageEntry is one line of `pm list packages [-f] [--show-versioncode]`.
type PackageEntry struct {
	Package     string
	VersionCode int64  // 0 when --show-versioncode was not given (API >= 28 only)
	APKPath     string // with -f: "/data/app/…/base.apk"
}

// listRe: "package:<pkg> versionCode:<n>" or with -f "package:<path>=<pkg> …"
// (appium-adb 16.0.9 app-commands.js regex /^package:(\S+)(?:\s+versionCode:(\d+))?/).
var listRe = regexp.MustCompile(`^package:(\S+)(?:\s+versionCode:(\d+))?`)

// ParsePackageList parses `pm list packages` / `cmd package list packages` output.
func ParsePackageList(out string) []PackageEntry {
	var ps []PackageEntry
	for _, l := range lines(out) {
		m := listRe.FindStringSubmatch(strings.TrimSpace(l))
		if m == nil {
			continue
		}
		e := PackageEntry{Package: m[1]}
		// -f prints "path=pkg"; paths hold '=' ("~~abc==/…") so split at the last one.
		if strings.HasPrefix(m[1], "/") {
			if i := strings.LastIndex(m[1], "="); i > 0 {
				e.APKPath, e.Package = m[1][:i], m[1][i+1:]
			}
		}
		if m[2] != "" {
			e.VersionCode, _ = atoi64(m[2])
		}
		if e.Package == "" {
			continue
		}
		ps = append(ps, e)
	}
	return ps
}

// ParsePmPath parses `pm path PKG`: one "package:/path/to/x.apk" line per APK
// (base then splits). Empty when the package is not installed (pm prints nothing
// and exits 1).
func ParsePmPath(out string) []string {
	var paths []string
	for _, l := range lines(out) {
		if p, ok := strings.CutPrefix(strings.TrimSpace(l), "package:"); ok && p != "" {
			paths = append(paths, p)
		}
	}
	return paths
}

// PackageInfo is what `dumpsys package PKG` says about the installed package.
type PackageInfo struct {
	Package          string
	UserID           int64 // the app uid ("userId=10057"; "appId=10197" on API 34)
	VersionCode      int64
	VersionName      string
	MinSDK           int64
	TargetSDK        int64
	CodePath         string
	FirstInstallTime time.Time // device local time, read as UTC (dumpsys has no zone)
	LastUpdateTime   time.Time
	// Signatures are the short certificate hashes of "signatures=PackageSignatures{…
	// signatures:[b76298ca]…}" (a hashCode, not a digest: use it only to compare).
	Signatures []string
	// Flags from "flags=[ SYSTEM HAS_CODE … ]".
	Flags []string
	// UpdatedSystemApp: a system app with an update in /data (section "Hidden
	// system packages" then holds the factory version).
	UpdatedSystemApp bool
}

var (
	pkgHeaderRe = regexp.MustCompile(`^\s*Package \[([^\]]+)\] \(([0-9a-f]+)\):`)
	sigRe       = regexp.MustCompile(`signatures:\[([^\]]*)\]`)
)

const dumpsysTime = "2006-01-02 15:04:05"

// ParseDumpsysPackage parses `dumpsys package PKG` and returns the first "Package
// [PKG]" block under "Packages:" (not the one under "Hidden system packages:",
// which is the factory version of an updated system app). ok is false when the
// package is not in the output (not installed). Fields: API 30+ capture
// fixtures/captures/dumpsys-package/.
func ParseDumpsysPackage(out, pkg string) (PackageInfo, bool) {
	var info PackageInfo
	found := false
	section := ""
	for _, l := range lines(out) {
		if l != "" && l[0] != ' ' { // an unindented line heads a section
			if found {
				break
			}
			section = strings.TrimSpace(l)
			continue
		}
		if section != "Packages:" {
			continue
		}
		if m := pkgHeaderRe.FindStringSubmatch(l); m != nil {
			if found { // the next package's block
				break
			}
			found = m[1] == pkg
			continue
		}
		if found {
			info.readLine(strings.TrimSpace(l))
		}
	}
	if found {
		info.Package = pkg
	}
	return info, found
}

// packageLineFields are the lines of a package's block that hold one field,
// by their prefix, each with what it sets from the rest of the line.
var packageLineFields = []struct {
	prefix string
	set    func(info *PackageInfo, v string)
}{
	{"signatures=", func(info *PackageInfo, v string) {
		if m := sigRe.FindStringSubmatch(v); m != nil {
			for _, s := range strings.Split(m[1], ",") {
				if s = strings.TrimSpace(s); s != "" {
					info.Signatures = append(info.Signatures, s)
				}
			}
		}
	}},
	{"flags=[", func(info *PackageInfo, v string) {
		info.Flags = strings.Fields(strings.Trim(v, "[]"))
		if slices.Contains(info.Flags, "UPDATED_SYSTEM_APP") {
			info.UpdatedSystemApp = true
		}
	}},
	{"firstInstallTime=", func(info *PackageInfo, v string) { info.FirstInstallTime, _ = time.Parse(dumpsysTime, v) }},
	{"lastUpdateTime=", func(info *PackageInfo, v string) { info.LastUpdateTime, _ = time.Parse(dumpsysTime, v) }},
	{"versionName=", func(info *PackageInfo, v string) { info.VersionName = v }},
	{"codePath=", func(info *PackageInfo, v string) { info.CodePath = v }},
}

// readLine reads one trimmed line of the package's block: a line of
// packageLineFields, or a line of "k=v" pairs ("versionCode=20 minSdk=27
// targetSdk=36").
func (info *PackageInfo) readLine(t string) {
	for _, f := range packageLineFields {
		if v, ok := strings.CutPrefix(t, f.prefix); ok {
			f.set(info, v)
			return
		}
	}
	for _, f := range strings.Fields(t) {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			continue
		}
		switch k {
		case "userId", "appId": // appId replaces userId on API 34
			if info.UserID == 0 {
				info.UserID, _ = atoi64(v)
			}
		case "versionCode":
			info.VersionCode, _ = atoi64(v)
		case "minSdk":
			info.MinSDK, _ = atoi64(v)
		case "targetSdk":
			info.TargetSDK, _ = atoi64(v)
		}
	}
}
