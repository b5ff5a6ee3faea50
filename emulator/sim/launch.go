package sim

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/rs/zerolog"

	"github.com/screengraph/screengraph-agent/emulator/sim/android"
	"github.com/screengraph/screengraph-agent/emulator/sim/uia2"
	"github.com/screengraph/screengraph-agent/fixtures"
)

// UiAutomator2Instrumentation is the instrumentation component Appium's
// uiautomator2 driver runs with `am instrument -w`; on the simulator it starts
// the in-device UiAutomator2 HTTP server on UiAutomator2Port.
const (
	UiAutomator2Instrumentation = "io.appium.uiautomator2.server.test/androidx.test.runner.AndroidJUnitRunner"
	UiAutomator2Port            = 6790
)

// LaunchConfig starts a simulated emulator running the Android device model.
type LaunchConfig struct {
	ConsolePort int
	ADBServer   string
	Profile     android.Profile
	Log         zerolog.Logger
	// Now is the device clock; nil means time.Now.
	Now func() time.Time
	// OnBootCompleted is android.Options.OnBootCompleted.
	OnBootCompleted func()

	// AVDName, ConsoleTokenPath, ReadOnly and Snapshots configure the console
	// (see Config).
	AVDName           string
	ADBServerOptional bool
	ConsoleTokenPath  string
	ReadOnly          bool
	Snapshots         SnapshotStore
}

// Launch builds the device model of cfg.Profile, registers the UiAutomator2
// server instrumentation, and starts the transport with the profile's faults.
func Launch(ctx context.Context, cfg LaunchConfig) (*Emulator, *android.Device, error) {
	if err := loadPreinstalledAPKs(&cfg.Profile); err != nil {
		return nil, nil, err
	}
	dev, err := android.New(cfg.Profile, android.Options{Now: cfg.Now, OnBootCompleted: cfg.OnBootCompleted})
	if err != nil {
		return nil, nil, fmt.Errorf("sim: profile %q: %w", cfg.Profile.Name, err)
	}
	dev.RegisterInstrumentation(UiAutomator2Instrumentation, func(ctx context.Context, d *android.Device, args map[string]string) error {
		ln, err := d.Listen(UiAutomator2Port)
		if err != nil {
			return err
		}
		return uia2.Serve(ctx, ln, d)
	})
	f := cfg.Profile.Faults
	e, err := Start(ctx, Config{
		ConsolePort:       cfg.ConsolePort,
		ADBServer:         cfg.ADBServer,
		Device:            androidDevice{dev},
		Log:               cfg.Log,
		AVDName:           cfg.AVDName,
		ADBServerOptional: cfg.ADBServerOptional,
		ConsoleTokenPath:  cfg.ConsoleTokenPath,
		ReadOnly:          cfg.ReadOnly,
		Snapshots:         cfg.Snapshots,
		Auth: Authorization{
			Required:    f.UnauthorizedFor != 0,
			AcceptAfter: f.UnauthorizedFor,
			Never:       f.UnauthorizedFor < 0,
		},
		Faults: TransportFaults{
			OfflineAfter:        f.OfflineAfter,
			OfflineFor:          f.OfflineFor,
			DropConnectionAfter: f.DropConnectionAfter,
			SlowReplies:         f.SlowReplies,
		},
	})
	if err != nil {
		return nil, nil, err
	}
	return e, dev, nil
}

// androidDevice adapts *android.Device to the transport's Device.
type androidDevice struct{ *android.Device }

func (a androidDevice) Prompt() string {
	return a.Prop("ro.product.device") + ":/ $ "
}

func (a androidDevice) Stat(p string) (FileStat, error) {
	fi, err := a.Device.Stat(p)
	return FileStat(fi), err
}

func (a androidDevice) ReadDir(p string) ([]FileStat, error) {
	fis, err := a.Device.ReadDir(p)
	out := make([]FileStat, len(fis))
	for i, fi := range fis {
		out[i] = FileStat(fi)
	}
	return out, err
}

func (a androidDevice) DialTCP(port int) (net.Conn, error) {
	return a.Device.DialTCP(context.Background(), port)
}

// loadPreinstalledAPKs reads the APK a preinstalled package names: a path,
// else a file of fixtures/apks shipped in the binary.
func loadPreinstalledAPKs(p *android.Profile) error {
	pre := append([]android.Package(nil), p.Preinstalled...)
	for i, pk := range pre {
		if pk.APK == "" || len(pk.APKData) > 0 {
			continue
		}
		b, err := os.ReadFile(pk.APK)
		if err != nil {
			if b, err = fixtures.APK(filepath.Base(pk.APK)); err != nil {
				return fmt.Errorf("sim: preinstalled %s: APK %q: not a file, nor one of fixtures/apks", pk.ID, pk.APK)
			}
		}
		pre[i].APKData = b
	}
	p.Preinstalled = pre
	return nil
}
