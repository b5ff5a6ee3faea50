package parse

import (
	"regexp"
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
		if l != "" && l[0] != ' ' {
			section = strings.TrimSpace(l)
			if found {
				break
			}
			continue
		}
		if section != "Packages:" {
			continue
		}
		if m := pkgHeaderRe.FindStringSubmatch(l); m != nil {
			if found {
				break
			}
			if m[1] == pkg {
				found = true
				info.Package = pkg
			}
			continue
		}
		if !found {
			continue
		}
		t := strings.TrimSpace(l)
		// A line may hold several "k=v" pairs ("versionCode=20 minSdk=27 targetSdk=36").
		switch {
		case strings.HasPrefix(t, "signatures="):
			if m := sigRe.FindStringSubmatch(t); m != nil {
				for _, s := range strings.Split(m[1], ",") {
					if s = strings.TrimSpace(s); s != "" {
						info.Signatures = append(info.Signatures, s)
					}
				}
			}
			continue
		case strings.HasPrefix(t, "flags=["):
			info.Flags = strings.Fields(strings.Trim(strings.TrimPrefix(t, "flags="), "[]"))
			for _, f := range info.Flags {
				if f == "UPDATED_SYSTEM_APP" {
					info.UpdatedSystemApp = true
				}
			}
			continue
		case strings.HasPrefix(t, "firstInstallTime="):
			info.FirstInstallTime, _ = time.Parse(dumpsysTime, strings.TrimPrefix(t, "firstInstallTime="))
			continue
		case strings.HasPrefix(t, "lastUpdateTime="):
			info.LastUpdateTime, _ = time.Parse(dumpsysTime, strings.TrimPrefix(t, "lastUpdateTime="))
			continue
		case strings.HasPrefix(t, "versionName="):
			info.VersionName = strings.TrimPrefix(t, "versionName=")
			continue
		case strings.HasPrefix(t, "codePath="):
			info.CodePath = strings.TrimPrefix(t, "codePath=")
			continue
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
	return info, found
}
