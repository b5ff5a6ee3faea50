package nodes

import (
	"regexp"
	"unicode"

	"github.com/screengraph/screengraph-agent/agent"
)

// Limits of a run request, checked at submit (NewSetupRun) so a request that
// could never run, or whose events could never be published, is refused with
// 400 before anything is stored.
const (
	// MaxRequestBytes bounds a whole run request (64 KiB).
	MaxRequestBytes = 64 << 10
	// MaxIDLength bounds ids: tenantId, projectId, deviceName (serial or
	// AVD name), in characters.
	MaxIDLength = 128
	// MaxNameLength bounds Android names: androidPackageId,
	// androidLaunchActivityName, in characters (255: Android's limit on a
	// package name, PackageManager's MAX_PACKAGE_NAME_LENGTH).
	MaxNameLength = 255
)

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

// checkID refuses an id over MaxIDLength characters or holding control
// characters (a newline in a serial or tenant splits log lines and
// subjects). path is the JSON path named in the error.
func checkID(path, v string) error {
	if n := len([]rune(v)); n > MaxIDLength {
		return agent.Errorf(agent.ErrInvalidRequest, "%s: %d characters, at most %d", path, n, MaxIDLength)
	}
	for _, r := range v {
		if unicode.IsControl(r) {
			return agent.Errorf(agent.ErrInvalidRequest, "%s: control character %U", path, r)
		}
	}
	return nil
}

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

// checkInputBounds applies the limits above to a request's decoded node inputs.
func checkInputBounds(in SetupInputs) error {
	if err := checkID("$.ensureDevice.deviceConfiguration.deviceName", in.EnsureDevice.DeviceConfiguration.DeviceName); err != nil {
		return err
	}
	for _, d := range []struct {
		path string
		desc ApplicationUnderTestDescriptor
	}{
		{"$.provisionApp.applicationUnderTestDescriptor", in.ProvisionApp.ApplicationUnderTestDescriptor},
		{"$.launchOrAttach.applicationUnderTestDescriptor", in.LaunchOrAttach.ApplicationUnderTestDescriptor},
	} {
		if d.desc.AndroidPackageID != "" {
			if err := CheckPackageID(d.path+".androidPackageId", d.desc.AndroidPackageID); err != nil {
				return err
			}
		}
		if err := CheckActivityName(d.path+".androidLaunchActivityName", d.desc.AndroidLaunchActivityName); err != nil {
			return err
		}
	}
	if a := in.WaitIdle.ApplicationUnderTestDescriptor; a != nil {
		if a.AndroidPackageID != "" {
			if err := CheckPackageID("$.waitIdle.applicationUnderTestDescriptor.androidPackageId", a.AndroidPackageID); err != nil {
				return err
			}
		}
		if err := CheckActivityName("$.waitIdle.applicationUnderTestDescriptor.androidLaunchActivityName", a.AndroidLaunchActivityName); err != nil {
			return err
		}
	}
	return nil
}
