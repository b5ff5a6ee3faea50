package android

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/screengraph/screengraph-agent/adb/parse"
	"github.com/screengraph/screengraph-agent/device"
)

// Signals is what one shell round trip reads of the device-side signals
// WaitIdle compares between samples (see ReadSignals).
type Signals struct {
	// Frames is gfxinfo's total frames rendered (-1: not read); NewestFrame
	// the FrameCompleted of the newest framestats row (device ns).
	Frames      int64
	NewestFrame int64
	// SinceFrame is how long before the dump the app last completed a frame
	// (device clock); -1 when framestats did not say.
	SinceFrame time.Duration
	// Focus is each display's focus, "ID:window|app|null;" per display.
	Focus string
	// Window is the `dumpsys window displays` output (its error dialogs);
	// PIDs the app's pids (nil: not read); Tables the socket tables
	// (/proc/net/tcp and tcp6).
	Window string
	PIDs   *[]int
	Tables string
	// UID is the app's uid: the one ReadSignals was given, or the one it
	// read (-1: unknown); EpochMillis the device clock (Unix ms) read with
	// the uid (0: not read).
	UID         int
	EpochMillis int64
	// Unread: the output was not in the shape asked for, so only UID and
	// EpochMillis are set.
	Unread bool
}

// ReadSignals reads the device's signals in one shell round trip:
//
//	dumpsys gfxinfo PKG framestats; echo SPLIT; pidof PKG; echo SPLIT;
//	dumpsys window displays; echo SPLIT; cat /proc/net/tcp /proc/net/tcp6
//
// (SPLIT = SampleSplit; without a package the gfxinfo and pidof parts are
// left out). With readUID the same shell also reads the device clock and
// the app's uid: `; echo SPLIT; date +%s.%N; echo SPLIT; dumpsys package
// PKG` is appended and its userId=/appId= is the uid (DumpsysUID); when
// that part names none, `pm list packages -U PKG` ("package:PKG uid:N") is
// asked (PmListUID). Errors are the shell's, as the device port gives them
// (the uid is then not read).
func ReadSignals(ctx context.Context, dev device.Device, pkg string, uid int, readUID bool) (Signals, error) {
	s := Signals{Frames: -1, SinceFrame: -1, UID: uid}
	cmd, want := signalsCommand(pkg, readUID)
	r, err := dev.Shell(ctx, cmd)
	if err != nil {
		return s, err
	}
	parts := strings.Split(r.Stdout, SampleSplit)
	if readUID {
		s.UID = -1
		if len(parts) == want+2 {
			s.EpochMillis = parse.ParseEpochMillis(parts[want])
			s.UID = DumpsysUID(parts[want+1], pkg)
			parts = parts[:want]
		}
		if s.UID < 0 {
			s.UID = PmListUID(ctx, dev, pkg)
		}
	}
	if len(parts) != want {
		s.Unread = true
		return s, nil
	}
	s.readParts(parts, pkg, r.Stderr)
	return s, nil
}

// signalsCommand is ReadSignals' shell command and the number of parts of
// its output before the clock's and the uid's (see ReadSignals).
func signalsCommand(pkg string, readUID bool) (string, int) {
	cmd := "dumpsys window displays; echo " + SampleSplit + "; cat /proc/net/tcp /proc/net/tcp6"
	want := 2
	if pkg != "" {
		cmd = "dumpsys gfxinfo " + pkg + " framestats; echo " + SampleSplit + "; pidof " + pkg + "; echo " + SampleSplit + "; " + cmd
		want += 2
	}
	if readUID {
		cmd += "; echo " + SampleSplit + "; date +%s.%N; echo " + SampleSplit + "; dumpsys package " + pkg
	}
	return cmd, want
}

// readParts reads the output's parts: with a package, its gfxinfo and pidof
// (pids unknown when pidof is missing: stderr names it), then the window
// dump and the socket tables.
func (s *Signals) readParts(parts []string, pkg, stderr string) {
	if pkg != "" {
		if fs, ok := parse.ParseGfxinfo(parts[0]); ok {
			s.Frames = fs.TotalFrames
		}
		if ft, ok := parse.ParseFramestats(parts[0]); ok {
			s.NewestFrame = ft.NewestFrameCompletedNanos
			if d, ok := ft.SinceLastFrame(); ok {
				s.SinceFrame = d
			}
		}
		if !strings.Contains(stderr, "pidof") {
			ps := parse.ParsePIDs(parts[1])
			s.PIDs = &ps
		}
		parts = parts[2:]
	}
	s.Window = parts[0]
	for _, d := range parse.ParseWindowFocus(parts[0]) {
		s.Focus += fmt.Sprintf("%d:%s|%s|%v;", d.DisplayID, d.CurrentFocusWindow, d.FocusedApp, d.CurrentFocusNull)
	}
	s.Tables = parts[1]
}

// SocketsInFlight reads /proc/net/tcp{,6} tables (parse.ParseProcNetTCP)
// for uid's sockets: known is false when uid is unknown (< 0) or the
// tables were not read (no header); busy when one of uid's sockets has
// bytes queued either way.
func SocketsInFlight(tables string, uid int) (known, busy bool) {
	if uid < 0 || !strings.Contains(tables, "local_address") {
		return false, false
	}
	for _, r := range parse.ParseProcNetTCP(tables) {
		if r.UID == uid && (r.TxQueue > 0 || r.RxQueue > 0) {
			return true, true
		}
	}
	return true, false
}
