package adb

import (
	"context"
	"io"
	"strconv"
)

// ExecOut runs cmd through the device's `exec:` service, as `adb exec-out
// CMD` does: no PTY and no shell protocol framing, so binary output (a
// `screencap -p` PNG) arrives byte for byte. It returns stdout (stderr is
// not separated by this service) up to max bytes; more is a process_error
// and nothing is returned. The context's deadline bounds the whole call.
func (c *Client) ExecOut(ctx context.Context, serial, cmd string, max int64) ([]byte, error) {
	cn, err := c.openService(ctx, "exec", serial, "exec:"+cmd)
	if err != nil {
		return nil, err
	}
	defer cn.Close()
	b, err := io.ReadAll(io.LimitReader(cn.r, max+1))
	if err != nil {
		return nil, cn.fail(err)
	}
	if int64(len(b)) > max {
		return nil, &Error{ID: IDProcessError, Msg: "exec " + strconv.Quote(cmd) + ": output exceeds " + strconv.FormatInt(max, 10) + " bytes"}
	}
	return b, nil
}
