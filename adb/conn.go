package adb

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"
)

// conn is one TCP connection to the adb server carrying one host request (and, after
// host:transport:S, one device service). Its lifetime is tied to a context: the
// context's deadline becomes the socket deadline and cancelling the context closes
// the socket, so a blocked read or write returns at once.
type conn struct {
	nc   net.Conn
	r    *bufio.Reader
	ctx  context.Context
	stop func() bool
	op   string
	// transportID is the adb transport the conn was switched to (0: not
	// known, see Client.transport).
	transportID int64
}

// connReadBuffer is the read buffer of each connection (bytes). It serves
// the protocol's small reads (4-byte statuses and lengths, shell v2 and sync
// headers); reads larger than the buffer (sync DATA chunks up to 64 KiB, shell
// output) go straight from the socket into the caller's slice, so a larger
// buffer saves no syscalls. Every shell is a connection of its own: the 64 KiB
// buffer it had was 90% of a shell round trip's allocated bytes.
const connReadBuffer = 4 << 10

func (c *Client) dial(ctx context.Context, op string) (*conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, classify(ctx, op, err)
	}
	d := net.Dialer{Timeout: c.dialTimeout()}
	nc, err := d.DialContext(ctx, "tcp", c.addr())
	if err != nil {
		return nil, classify(ctx, op, err)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(dl)
	}
	cn := &conn{nc: nc, r: bufio.NewReaderSize(nc, connReadBuffer), ctx: ctx, op: op}
	// Closing (not only expiring the deadline) also covers cancel without deadline.
	cn.stop = context.AfterFunc(ctx, func() { _ = nc.Close() })
	return cn, nil
}

func (c *conn) Close() error {
	c.stop()
	return c.nc.Close()
}

// fail classifies err in the light of this conn's context.
func (c *conn) fail(err error) error { return classify(c.ctx, c.op, err) }

// send writes one host request: 4 hex digits of length, then the payload.
func (c *conn) send(req string) error {
	if len(req) > 0xffff {
		return protocolError(c.op, "request too long (%d bytes)", len(req))
	}
	buf := make([]byte, 0, 4+len(req))
	buf = fmt.Appendf(buf, "%04x", len(req))
	buf = append(buf, req...)
	if _, err := c.nc.Write(buf); err != nil {
		return c.fail(err)
	}
	return nil
}

// status reads OKAY, or FAIL + length-prefixed message (returned classified).
func (c *conn) status() error {
	var st [4]byte
	if _, err := io.ReadFull(c.r, st[:]); err != nil {
		return c.fail(err)
	}
	switch string(st[:]) {
	case "OKAY":
		return nil
	case "FAIL":
		msg, err := c.readString()
		if err != nil {
			return err
		}
		return serverFailure(c.op, msg)
	}
	return protocolError(c.op, "unexpected status %q", st[:])
}

// request = send + status.
func (c *conn) request(req string) error {
	if err := c.send(req); err != nil {
		return err
	}
	return c.status()
}

// readString reads a length-prefixed (4 hex digits) string.
func (c *conn) readString() (string, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(c.r, hdr[:]); err != nil {
		return "", c.fail(err)
	}
	n, err := strconv.ParseUint(string(hdr[:]), 16, 32)
	if err != nil {
		return "", protocolError(c.op, "bad length %q", hdr[:])
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(c.r, buf); err != nil {
		return "", c.fail(err)
	}
	return string(buf), nil
}

// readTransportID reads the 8-byte little-endian transport id that follows
// host:tport:'s OKAY.
func (c *conn) readTransportID() error {
	var b [8]byte
	if _, err := io.ReadFull(c.r, b[:]); err != nil {
		return c.fail(err)
	}
	c.transportID = int64(binary.LittleEndian.Uint64(b[:]))
	return nil
}

// readAll reads until the server closes the stream.
func (c *conn) readAll() ([]byte, error) {
	b, err := io.ReadAll(c.r)
	if err != nil {
		return b, c.fail(err)
	}
	return b, nil
}

// write sends raw bytes (device service payload).
func (c *conn) write(p []byte) error {
	if _, err := c.nc.Write(p); err != nil {
		return c.fail(err)
	}
	return nil
}

func (c *Client) dialTimeout() time.Duration {
	if c.DialTimeout > 0 {
		return c.DialTimeout
	}
	return 5 * time.Second
}
