package device

import (
	"bytes"
	"context"
	"fmt"
	"time"
)

// IdleScreen is what WaitIdle saw of the screen it proved idle, handed to
// the success evidence of the same run, step and attempt (nodes.WaitIdle,
// device/evidence.IdleScreens) so the capture after the graph's last node
// does not ask the device and the Appium server again.
type IdleScreen struct {
	// RunID, StepOrdinal and Attempt name WaitIdle's attempt: only the
	// evidence request of that attempt may use the screen.
	RunID       string
	StepOrdinal int
	Attempt     int
	// Serial is the adb serial, SessionID the Appium session the page
	// source came from ("" when WaitIdle read none).
	Serial, SessionID string
	// PageSource is the proving sample's Driver.PageSource (the XML whose
	// SHA-256 the idle signature holds); "" when not kept.
	PageSource string
	// Screenshot is a PNG (`screencap -p`) taken between the last two
	// samples, which both saw the same idle signature; nil when none was
	// proven (then the evidence takes its own).
	Screenshot []byte
	// At is when the proving sample was taken (host clock, UTC).
	At time.Time
}

// IdleScreens keeps what WaitIdle proved idle until the run's success
// evidence takes it (nodes.Ports.IdleScreens; device/evidence implements
// it). Keep must not block and must bound its memory.
type IdleScreens interface {
	Keep(IdleScreen)
}

// pngSignature starts every PNG (ISO/IEC 15948 §5.2).
var pngSignature = []byte{0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'}

// Screencap is `adb exec-out screencap -p` (binary clean through
// ExecOuter, else a shell's stdout), at most max bytes, checked to be a PNG.
// Errors are the device's (*agent.Error) or a plain error for output that
// is not a PNG.
func Screencap(ctx context.Context, dev Device, max int64) ([]byte, error) {
	var b []byte
	if eo, ok := dev.(ExecOuter); ok {
		var err error
		if b, err = eo.ExecOut(ctx, "screencap -p", max); err != nil {
			return nil, err
		}
	} else {
		r, err := dev.Shell(ctx, "screencap -p")
		if err != nil {
			return nil, err
		}
		if int64(len(r.Stdout)) > max {
			return nil, fmt.Errorf("screencap -p returned %d bytes, more than %d", len(r.Stdout), max)
		}
		b = []byte(r.Stdout)
	}
	if !bytes.HasPrefix(b, pngSignature) {
		n := min(len(b), 40)
		return nil, fmt.Errorf("screencap -p returned %d bytes that are not a PNG (%q…)", len(b), b[:n])
	}
	return b, nil
}
