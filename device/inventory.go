// Package device holds what the nodes consume of a device host: the ADB-side
// and Appium-side ports, and the inventory of devices the adb server knows.
package device

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/screengraph/screengraph-agent/adb"
)

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

// bootProbe reads the three boot properties in one shell round trip, the
// combined form bitrise's go-android uses (`1\n1\nstopped` when booted).
const bootProbe = "getprop dev.bootcomplete; getprop sys.boot_completed; getprop init.svc.bootanim"

// Describe asks the adb server for every device it knows, in any state, and
// probes the online ones for model, API level and boot readiness, in parallel,
// each probe bounded by perDevice.
func Describe(ctx context.Context, c *adb.Client, perDevice time.Duration) ([]Summary, error) {
	infos, err := c.Devices(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Summary, len(infos))
	var wg sync.WaitGroup
	for i, in := range infos {
		out[i] = Summary{Serial: in.Serial, State: string(in.State), Model: in.Model, Product: in.Product}
		if !in.State.Online() {
			out[i].BootDetail = "adb state " + string(in.State)
			continue
		}
		wg.Add(1)
		go func(s *Summary) {
			defer wg.Done()
			pctx, cancel := context.WithTimeout(ctx, perDevice)
			defer cancel()
			probe(pctx, c, s)
		}(&out[i])
	}
	wg.Wait()
	return out, nil
}

func probe(ctx context.Context, c *adb.Client, s *Summary) {
	props, err := c.ShellOutput(ctx, s.Serial, "getprop ro.build.version.sdk; getprop ro.build.version.release; getprop ro.product.model")
	if err != nil {
		s.BootDetail = "probe failed: " + err.Error()
		return
	}
	ls := strings.Split(strings.ReplaceAll(props, "\r\n", "\n"), "\n")
	if len(ls) >= 3 {
		s.APILevel, _ = strconv.Atoi(strings.TrimSpace(ls[0]))
		s.Release = strings.TrimSpace(ls[1])
		if m := strings.TrimSpace(ls[2]); m != "" {
			s.Model = m
		}
	}
	boot, err := c.ShellOutput(ctx, s.Serial, bootProbe)
	if err != nil {
		s.BootDetail = "probe failed: " + err.Error()
		return
	}
	services := ""
	if st := adb.ParseBootStatus(boot, ""); st.SysBootCompleted {
		// Only a booted device is worth the longer service listing.
		services, err = c.ShellOutput(ctx, s.Serial, "service list")
		if err != nil {
			s.BootDetail = "probe failed: " + err.Error()
			return
		}
	}
	st := adb.ParseBootStatus(boot, services)
	s.BootReady, s.BootDetail = st.Ready, st.Reason
}
