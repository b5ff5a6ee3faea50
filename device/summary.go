// Package device holds what the nodes consume of a device host: the ADB-side
// and Appium-side ports (Device, ExecOuter, Driver, Emulators) and the shapes
// they speak. It imports no adapter: device/adbdevice implements Device over
// the adb server, appium and emulator implement the others.
package device

// Summary is one device as `screengraph-agent devices` reports it.
type Summary struct {
	Serial string `json:"serial"`
	// State is the adb server's word: device, offline, unauthorized,
	// authorizing, connecting, bootloader, recovery, sideload, …
	State   string `json:"state"`
	Model   string `json:"model,omitempty"`
	Product string `json:"product,omitempty"`
	// APILevel is ro.build.version.sdk; 0 when the device cannot be asked.
	APILevel int    `json:"apiLevel,omitempty"`
	Release  string `json:"release,omitempty"`
	// BootReady: sys.boot_completed=1, boot animation stopped, and the
	// activity, package and window services up (android-recipes.md).
	BootReady bool `json:"bootReady"`
	// BootDetail says what readiness still waits for, or why it is unknown.
	BootDetail string `json:"bootDetail,omitempty"`
}
