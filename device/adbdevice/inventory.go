// Package adbdevice implements the device ports over an adb server (package
// adb, host protocol): ADBDevice is device.Device (and device.ExecOuter) for one
// serial, Resolver and ResolveSerial name a device, Describe is the inventory
// of the devices the server knows. Every error is an *agent.Error
// (AgentError classifies adb errors once, here).
package adbdevice

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/screengraph/screengraph-agent/adb"
	"github.com/screengraph/screengraph-agent/adb/parse"
	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/service"
	"github.com/screengraph/screengraph-agent/device"
)

// bootProbe reads the three boot properties in one shell round trip, the
// combined form bitrise's go-android uses (`1\n1\nstopped` when booted).
const bootProbe = "getprop dev.bootcomplete; getprop sys.boot_completed; getprop init.svc.bootanim"

// Describe asks the adb server for every device it knows, in any state, and
// probes the online ones for model, API level and boot readiness, in parallel,
// each probe bounded by perDevice.
func Describe(ctx context.Context, c *adb.Client, perDevice time.Duration) ([]device.Summary, error) {
	infos, err := c.Devices(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]device.Summary, len(infos))
	var wg sync.WaitGroup
	for i, in := range infos {
		out[i] = device.Summary{Serial: in.Serial, State: string(in.State), Model: in.Model, Product: in.Product}
		if !in.State.Online() {
			out[i].BootDetail = "adb state " + string(in.State)
			continue
		}
		wg.Add(1)
		go func(s *device.Summary) {
			defer wg.Done()
			pctx, cancel := context.WithTimeout(ctx, perDevice)
			defer cancel()
			probe(pctx, c, s)
		}(&out[i])
	}
	wg.Wait()
	return out, nil
}

func probe(ctx context.Context, c *adb.Client, s *device.Summary) {
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
	if st := parse.ParseBootStatus(boot, ""); st.SysBootCompleted {
		// Only a booted device is worth the longer service listing.
		services, err = c.ShellOutput(ctx, s.Serial, "service list")
		if err != nil {
			s.BootDetail = "probe failed: " + err.Error()
			return
		}
	}
	st := parse.ParseBootStatus(boot, services)
	s.BootReady, s.BootDetail = st.Ready, st.Reason
}

// Inventory lists the adb server's devices for the daemon's service
// (service.DeviceLister, GET /v1/devices): Describe, each device probed for
// at most 5 s. Errors: the adb server's, as agent.ErrNetwork ("adb server: …").
type Inventory struct{ ADB *adb.Client }

var _ service.DeviceLister = Inventory{}

// Devices returns every device the adb server knows, in any state.
func (i Inventory) Devices(ctx context.Context) ([]service.Device, error) {
	list, err := Describe(ctx, i.ADB, 5*time.Second)
	if err != nil {
		return nil, agent.Wrap(agent.ErrNetwork, err, "adb server")
	}
	out := make([]service.Device, 0, len(list))
	for _, d := range list {
		out = append(out, service.Device{Serial: d.Serial, State: d.State, Model: d.Model, APILevel: d.APILevel, BootReady: d.BootReady})
	}
	return out, nil
}

// Ready is the daemon's readiness check of the adb server (GET /readyz):
// it answers host:version within ctx. Errors: the adb client's.
func (i Inventory) Ready(ctx context.Context) error {
	_, err := i.ADB.ServerVersion(ctx)
	return err
}

// MaxScreenBytes bounds one live screen frame (a 1440x3200 screen of
// photographs is a few MiB as PNG; 16 MiB leaves room without letting a
// misbehaving device fill the daemon's memory).
const MaxScreenBytes = 16 << 20

var _ service.ScreenCapturer = Inventory{}

// CaptureScreen is the live screen's capture (service.ScreenCapturer): `adb
// exec-out screencap -p` (frameworks/base cmds/screencap), at most
// MaxScreenBytes, checked to be a PNG; a serial the adb server does not list
// is device_not_found at once (no reconnect grace: the next period tries
// again). Errors: the device's (*agent.Error).
func (i Inventory) CaptureScreen(ctx context.Context, serial string) ([]byte, error) {
	b, err := device.Screencap(ctx, NewADBDevice(i.ADB, serial).WithReconnectGrace(0), MaxScreenBytes)
	var ae *agent.Error
	if err != nil && !errors.As(err, &ae) {
		err = agent.Wrap(agent.ErrProcess, err, "screencap")
	}
	return b, err
}
