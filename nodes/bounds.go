package nodes

import (
	"unicode"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/device/android"
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
	// MaxNameLength bounds Android names (android.MaxNameLength).
	MaxNameLength = android.MaxNameLength
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
			if err := android.CheckPackageID(d.path+".androidPackageId", d.desc.AndroidPackageID); err != nil {
				return err
			}
		}
		if err := android.CheckActivityName(d.path+".androidLaunchActivityName", d.desc.AndroidLaunchActivityName); err != nil {
			return err
		}
	}
	if a := in.WaitIdle.ApplicationUnderTestDescriptor; a != nil {
		if a.AndroidPackageID != "" {
			if err := android.CheckPackageID("$.waitIdle.applicationUnderTestDescriptor.androidPackageId", a.AndroidPackageID); err != nil {
				return err
			}
		}
		if err := android.CheckActivityName("$.waitIdle.applicationUnderTestDescriptor.androidLaunchActivityName", a.AndroidLaunchActivityName); err != nil {
			return err
		}
	}
	return nil
}
