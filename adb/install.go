package adb

import (
	"context"
	"io"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/screengraph/screengraph-agent/adb/parse"
)

// InstallOptions are the `pm install` flags the daemon uses.
type InstallOptions struct {
	Replace        bool     // -r: replace an existing app, keeping its data
	AllowTestOnly  bool     // -t: allow android:testOnly APKs (else INSTALL_FAILED_TEST_ONLY)
	AllowDowngrade bool     // -d: allow a lower versionCode (debuggable builds only)
	GrantAll       bool     // -g: grant all runtime permissions
	Extra          []string // further pm install arguments, passed as they are
	Progress       Progress // bytes of the APK sent to the device
}

func (o InstallOptions) args() []string {
	var a []string
	if o.Replace {
		a = append(a, "-r")
	}
	if o.AllowTestOnly {
		a = append(a, "-t")
	}
	if o.AllowDowngrade {
		a = append(a, "-d")
	}
	if o.GrantAll {
		a = append(a, "-g")
	}
	return append(a, o.Extra...)
}

// Install installs the local APK apk. With the device feature `cmd` it streams the
// bytes to `exec:cmd package 'install' … -S SIZE` (what `adb install` does since
// API 24); without it, it pushes to /data/local/tmp and runs `pm install`, then
// removes the copy. Failures printed by the package manager come back as
// install_failed with Code = the INSTALL_FAILED_… / INSTALL_PARSE_FAILED_… constant
// (see parse.ParseInstallOutput).
func (c *Client) Install(ctx context.Context, serial, apk string, opt InstallOptions) error {
	f, err := c.cachedFeatures(ctx, serial)
	if err != nil {
		return err
	}
	file, err := os.Open(apk)
	if err != nil {
		return &Error{ID: IDProcessError, Msg: "install: open APK", Err: err}
	}
	defer file.Close()
	st, err := file.Stat()
	if err != nil {
		return &Error{ID: IDProcessError, Msg: "install: stat APK", Err: err}
	}
	if !f.Has("cmd") {
		return c.installPushed(ctx, serial, file, st, opt)
	}
	args := append(opt.args(), "-S", strconv.FormatInt(st.Size(), 10))
	cn, err := c.openService(ctx, "install", serial, "exec:cmd package 'install' "+strings.Join(args, " "))
	if err != nil {
		return err
	}
	defer cn.Close()
	var src io.Reader = file
	if opt.Progress != nil {
		src = &progressReader{r: file, total: st.Size(), fn: opt.Progress}
	}
	if _, err := io.Copy(cn.nc, src); err != nil {
		// The package manager may have refused early (e.g. storage) and closed.
		if out, rerr := cn.readAll(); rerr == nil && len(out) > 0 {
			return parse.ParseInstallOutput(string(out))
		}
		return cn.fail(err)
	}
	out, err := cn.readAll()
	if err != nil {
		return err
	}
	return parse.ParseInstallOutput(string(out))
}

func (c *Client) installPushed(ctx context.Context, serial string, file *os.File, st os.FileInfo, opt InstallOptions) error {
	remote := path.Join("/data/local/tmp", filepath.Base(file.Name()))
	if err := c.Push(ctx, serial, file, st.Size(), remote, 0o644, time.Now(), opt.Progress); err != nil {
		return err
	}
	defer func() {
		// Best effort, bounded on its own: the copy must not outlive a cancelled install.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_, _ = c.Shell(rctx, serial, "rm -f "+shellQuote(remote))
	}()
	args := append([]string{"pm", "install"}, opt.args()...)
	res, err := c.Shell(ctx, serial, strings.Join(args, " ")+" "+shellQuote(remote))
	if err != nil {
		return err
	}
	return parse.ParseInstallOutput(string(res.Stdout) + string(res.Stderr))
}

// Uninstall removes package pkg (`cmd package uninstall` with feature cmd, `pm
// uninstall` otherwise). A failure is process_error with Code = the DELETE_FAILED_…
// constant when printed ("Failure [DELETE_FAILED_INTERNAL_ERROR]" is what pm prints
// for a package that is not installed).
func (c *Client) Uninstall(ctx context.Context, serial, pkg string, keepData bool) error {
	f, err := c.cachedFeatures(ctx, serial)
	if err != nil {
		return err
	}
	args := "uninstall "
	if keepData {
		args += "-k "
	}
	args += shellQuote(pkg)
	var out string
	if f.Has("cmd") {
		cn, err := c.openService(ctx, "uninstall", serial, "exec:cmd package "+args)
		if err != nil {
			return err
		}
		b, err := cn.readAll()
		cn.Close()
		if err != nil {
			return err
		}
		out = string(b)
	} else {
		res, err := c.Shell(ctx, serial, "pm "+args)
		if err != nil {
			return err
		}
		out = string(res.Stdout) + string(res.Stderr)
	}
	if err := parse.ParseInstallOutput(out); err != nil {
		e := err.(*Error)
		e.ID = IDProcessError
		e.Msg = "uninstall " + pkg + ": " + e.Msg
		return e
	}
	return nil
}

type progressReader struct {
	r     io.Reader
	done  int64
	total int64
	fn    Progress
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if n > 0 {
		p.done += int64(n)
		p.fn(p.done, p.total)
	}
	return n, err
}

// shellQuote quotes s for the device's sh when it holds anything but safe characters.
func shellQuote(s string) string {
	safe := s != ""
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._-/:=,+@%", r)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func containsFold(s, sub string) bool {
	return strings.Contains(strings.ToLower(s), strings.ToLower(sub))
}
