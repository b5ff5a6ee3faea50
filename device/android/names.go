package android

import (
	"regexp"

	"github.com/screengraph/screengraph-agent/agent"
)

// MaxNameLength bounds Android names: androidPackageId,
// androidLaunchActivityName, in characters (255: Android's limit on a
// package name, PackageManager's MAX_PACKAGE_NAME_LENGTH).
const MaxNameLength = 255

// Android's grammar, as aapt2 and PackageParser check it: a package id is at
// least two dot-separated segments, each a letter then letters, digits or
// '_' (frameworks/base core/java/android/content/pm/parsing/FrameworkParsingPackageUtils.java
// validateName). An activity is a Java class name (segments of letters,
// digits and '_' not starting with a digit), fully qualified or ".Short",
// optionally as a component "PKG/CLASS". '$' (inner classes) is refused:
// the launch command goes through the device's sh, where $ expands.
var (
	packageIDPattern = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]*(\.[A-Za-z][A-Za-z0-9_]*)+$`)
	activityPattern  = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9_]*(\.[A-Za-z][A-Za-z0-9_]*)+/)?\.?[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)
)

// CheckPackageID refuses a package id that is not Android's grammar or is
// over MaxNameLength characters; path names the JSON path in the error
// (an *agent.Error invalid_request_error).
func CheckPackageID(path, v string) error {
	if len(v) > MaxNameLength {
		return agent.Errorf(agent.ErrInvalidRequest, "%s: %d characters, at most %d", path, len([]rune(v)), MaxNameLength)
	}
	if !packageIDPattern.MatchString(v) {
		return agent.Errorf(agent.ErrInvalidRequest, "%s: %q is not an Android package id (segments of letters, digits and _ joined by dots, e.g. com.example.app)", path, v)
	}
	return nil
}

// CheckActivityName refuses an activity name that is not a Java class name
// (fully qualified, ".Short", or "PKG/CLASS") or is over MaxNameLength
// characters; "" (resolve the launcher activity) passes.
func CheckActivityName(path, v string) error {
	if v == "" {
		return nil
	}
	if len(v) > MaxNameLength {
		return agent.Errorf(agent.ErrInvalidRequest, "%s: %d characters, at most %d", path, len([]rune(v)), MaxNameLength)
	}
	if !activityPattern.MatchString(v) {
		return agent.Errorf(agent.ErrInvalidRequest, "%s: %q is not an activity name (a Java class name: com.example.app.MainActivity, .MainActivity or com.example.app/.MainActivity)", path, v)
	}
	return nil
}
