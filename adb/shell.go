package adb

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"strconv"
)

// Shell v2 packet ids (adb shell_protocol.h): [id u8][len u32 LE][data].
const (
	shellStdin      = 0
	shellStdout     = 1
	shellStderr     = 2
	shellExit       = 3
	shellCloseStdin = 4
)

// ShellResult is the outcome of one shell command. A non-zero ExitCode is not an
// error of Shell: the caller decides what it means.
type ShellResult struct {
	Stdout []byte
	// Stderr is empty on the shell: fallback, where the device merges it into Stdout.
	Stderr   []byte
	ExitCode int
	// V2 tells whether shell_v2 (separate stderr) was used.
	V2 bool
	// TransportID is the adb server's id of the transport the command ran
	// on (`adb devices -l` transport_id): a new one after every reconnect
	// or reboot of the device. 0 when the server did not say.
	TransportID int64
}

// exitMarker ends the output of a shell: (v1) command so the exit code can be read
// back; the trick of openatx/adbutils' shell2 ("; echo :$?"), on its own line so a
// trailing '&' or comment in the command cannot swallow it.
const exitMarker = "\x1fSGEXIT:"

// Shell runs cmd (one sh -c command line, quoting is the caller's) on the device
// and returns stdout, stderr and the exit code. It uses `shell,v2,raw:` when the
// device has feature shell_v2 and falls back to `shell:` (stderr merged into
// stdout, exit code recovered with a trailing marker) otherwise. The context's
// deadline bounds the whole call; when it passes, the stream is closed, the device
// shell gets SIGHUP, and a timeout *Error is returned with no partial result.
func (c *Client) Shell(ctx context.Context, serial, cmd string) (ShellResult, error) {
	f, err := c.cachedFeatures(ctx, serial)
	if err != nil {
		return ShellResult{}, err
	}
	if f.Has("shell_v2") {
		return c.shellV2(ctx, serial, cmd)
	}
	return c.shellV1(ctx, serial, cmd)
}

// ShellOutput runs cmd and returns its stdout as a string. A non-zero exit code
// becomes a process_error carrying stderr (or stdout when stderr is empty).
func (c *Client) ShellOutput(ctx context.Context, serial, cmd string) (string, error) {
	r, err := c.Shell(ctx, serial, cmd)
	if err != nil {
		return "", err
	}
	if r.ExitCode != 0 {
		msg := bytes.TrimSpace(r.Stderr)
		if len(msg) == 0 {
			msg = bytes.TrimSpace(r.Stdout)
		}
		return string(r.Stdout), &Error{ID: IDProcessError, Msg: "shell " + strconv.Quote(cmd) +
			": exit " + strconv.Itoa(r.ExitCode) + ": " + string(msg)}
	}
	return string(r.Stdout), nil
}

func (c *Client) shellV2(ctx context.Context, serial, cmd string) (ShellResult, error) {
	cn, err := c.openService(ctx, "shell", serial, "shell,v2,raw:"+cmd)
	if err != nil {
		return ShellResult{}, err
	}
	defer cn.Close()
	// Close stdin at once, as `adb shell CMD` does when its stdin is not a tty:
	// a command reading stdin gets EOF instead of hanging until the deadline.
	if err := cn.write(shellPacket(shellCloseStdin, nil)); err != nil {
		return ShellResult{}, err
	}
	res, err := DecodeShellV2(cn.r)
	if err != nil {
		return ShellResult{}, cn.fail(err)
	}
	res.TransportID = cn.transportID
	return res, nil
}

// DecodeShellV2 reads shell_v2 packets until the exit packet (or EOF, which without
// an exit packet is io.ErrUnexpectedEOF: the device went away mid-command).
func DecodeShellV2(r io.Reader) (ShellResult, error) {
	res := ShellResult{V2: true}
	var hdr [5]byte
	var out, errb bytes.Buffer
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return ShellResult{}, err
		}
		n := binary.LittleEndian.Uint32(hdr[1:])
		var dst io.Writer = io.Discard
		switch hdr[0] {
		case shellStdout:
			dst = &out
		case shellStderr:
			dst = &errb
		case shellExit:
			if n < 1 {
				return ShellResult{}, io.ErrUnexpectedEOF
			}
			var code [1]byte
			if _, err := io.ReadFull(r, code[:]); err != nil {
				return ShellResult{}, io.ErrUnexpectedEOF
			}
			if _, err := io.CopyN(io.Discard, r, int64(n-1)); err != nil {
				return ShellResult{}, io.ErrUnexpectedEOF
			}
			res.Stdout, res.Stderr, res.ExitCode = out.Bytes(), errb.Bytes(), int(code[0])
			return res, nil
		}
		if _, err := io.CopyN(dst, r, int64(n)); err != nil {
			return ShellResult{}, io.ErrUnexpectedEOF
		}
	}
}

func shellPacket(id byte, data []byte) []byte {
	p := make([]byte, 5+len(data))
	p[0] = id
	binary.LittleEndian.PutUint32(p[1:], uint32(len(data)))
	copy(p[5:], data)
	return p
}

func (c *Client) shellV1(ctx context.Context, serial, cmd string) (ShellResult, error) {
	cn, err := c.openService(ctx, "shell", serial, "shell:"+cmd+"\necho \""+exitMarker+"$?\"")
	if err != nil {
		return ShellResult{}, err
	}
	defer cn.Close()
	raw, err := cn.readAll()
	if err != nil {
		return ShellResult{}, err
	}
	out, code, ok := splitExitMarker(raw)
	if !ok {
		return ShellResult{}, &Error{ID: IDNetworkError, Retryable: true,
			Msg: "shell: output ended before the exit marker (device went away?)"}
	}
	return ShellResult{Stdout: out, ExitCode: code, TransportID: cn.transportID}, nil
}

// splitExitMarker cuts "…\x1fSGEXIT:N\n" (or \r\n from a PTY) off the end of raw.
func splitExitMarker(raw []byte) (out []byte, code int, ok bool) {
	i := bytes.LastIndex(raw, []byte(exitMarker))
	if i < 0 {
		return raw, -1, false
	}
	tail := bytes.TrimRight(raw[i+len(exitMarker):], "\r\n")
	n, err := strconv.Atoi(string(tail))
	if err != nil {
		return raw, -1, false
	}
	return raw[:i], n, true
}
