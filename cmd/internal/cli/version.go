package cli

import "runtime/debug"

// BuildVersion is the binary's version, commit and build date: those set
// at link time (the release build's -X main.version=… etc.; "" when not),
// else the module's build info (a plain go build: "devel", vcs.revision
// with "-dirty" when modified, vcs.time).
func BuildVersion(version, commit, date string) (v, rev, at string) {
	v, rev, at = version, commit, date
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return
	}
	if v == "" {
		v = bi.Main.Version
		if v == "" || v == "(devel)" {
			v = "devel"
		}
	}
	for _, s := range bi.Settings {
		switch {
		case s.Key == "vcs.revision" && rev == "":
			rev = s.Value
		case s.Key == "vcs.time" && at == "":
			at = s.Value
		case s.Key == "vcs.modified" && s.Value == "true" && rev != "" && commit == "":
			rev += "-dirty"
		}
	}
	return
}
