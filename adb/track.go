package adb

import (
	"context"

	"github.com/screengraph/screengraph-agent/adb/parse"
)

// Tracker is an open host:track-devices-l stream: the server sends the whole device
// list (every state, offline included) at once and again after every change.
// A Tracker is used by one goroutine.
type Tracker struct {
	cn *conn
}

// TrackDevices opens the watch stream. adb 1.0.41 supports host:track-devices-l
// (measured: same lines as host:devices-l), which also gives product, model and
// transport_id. The stream lives until ctx ends or Close; the context should carry
// no deadline unless the watch itself is bounded.
func (c *Client) TrackDevices(ctx context.Context) (*Tracker, error) {
	cn, err := c.dial(ctx, "track-devices")
	if err != nil {
		return nil, err
	}
	if err := cn.request("host:track-devices-l"); err != nil {
		cn.Close()
		return nil, err
	}
	return &Tracker{cn: cn}, nil
}

// Next blocks until the server sends the next full device list. The first call
// returns the list at the time of the request. It fails with network_error when
// the server goes away, canceled/timeout when the context ends.
func (t *Tracker) Next() ([]parse.DeviceInfo, error) {
	s, err := t.cn.readString()
	if err != nil {
		return nil, err
	}
	list := parse.ParseDevicesLong(s)
	if list == nil {
		list = []parse.DeviceInfo{}
	}
	return list, nil
}

// Close ends the stream.
func (t *Tracker) Close() error { return t.cn.Close() }

// WatchDevices calls fn with every device list until ctx ends (returns nil) or the
// stream fails (returns the error; the caller decides whether to reopen).
func (c *Client) WatchDevices(ctx context.Context, fn func([]parse.DeviceInfo)) error {
	t, err := c.TrackDevices(ctx)
	if err != nil {
		return err
	}
	defer t.Close()
	for {
		list, err := t.Next()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		fn(list)
	}
}
