package device

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
)

// shellOnly is a Device without ExecOut: screencap's PNG comes as a
// shell's stdout.
type shellOnly struct{ out string }

func (d shellOnly) Serial() string                                        { return "s" }
func (d shellOnly) State(context.Context) (string, error)                 { return "device", nil }
func (d shellOnly) Install(context.Context, string, InstallOptions) error { return nil }
func (d shellOnly) Uninstall(context.Context, string) error               { return nil }
func (d shellOnly) Pull(context.Context, string, io.Writer) (int64, error) {
	return 0, errors.New("no")
}
func (d shellOnly) Shell(_ context.Context, cmd string) (ShellResult, error) {
	if cmd != "screencap -p" {
		return ShellResult{}, errors.New("unexpected " + cmd)
	}
	return ShellResult{Stdout: d.out}, nil
}

// withExecOut adds exec-out, which Screencap prefers.
type withExecOut struct {
	shellOnly
	bin []byte
	max int64
}

func (d *withExecOut) ExecOut(_ context.Context, cmd string, max int64) ([]byte, error) {
	d.max = max
	return d.bin, nil
}

// Screencap takes exec-out when there is one, a shell's stdout otherwise,
// returns PNGs only and holds the shell's answer to max bytes too.
func TestScreencap(t *testing.T) {
	ctx := context.Background()
	png := "\x89PNG\r\n\x1a\n" + strings.Repeat("x", 100)
	if b, err := Screencap(ctx, shellOnly{out: png}, 1024); err != nil || string(b) != png {
		t.Errorf("shell PNG: %q %v", b, err)
	}
	if _, err := Screencap(ctx, shellOnly{out: png}, 64); err == nil || !strings.Contains(err.Error(), "more than 64") {
		t.Errorf("a shell answer over max: %v", err)
	}
	// A PTY turns \n into \r\n: not a PNG any more, refused.
	if _, err := Screencap(ctx, shellOnly{out: "\x89PNG\r\r\n\x1a\r\n"}, 1024); err == nil || !strings.Contains(err.Error(), "not a PNG") {
		t.Errorf("mangled PNG: %v", err)
	}
	d := &withExecOut{shellOnly: shellOnly{out: "not used"}, bin: []byte(png)}
	if b, err := Screencap(ctx, d, 2048); err != nil || !bytes.Equal(b, []byte(png)) || d.max != 2048 {
		t.Errorf("exec-out: %q %v (max %d)", b, err, d.max)
	}
}
