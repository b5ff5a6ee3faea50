package adb

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/electricbubble/gadb"

	"github.com/screengraph/screengraph-agent/adb/parse"
)

func wantID(t *testing.T, err error, id string) *Error {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not *adb.Error", err, err)
	}
	if e.ID != id {
		t.Fatalf("error id = %q, want %q (%v)", e.ID, id, err)
	}
	return e
}

func TestServerVersionAndEmptyDevices(t *testing.T) {
	c := adbServer(t)
	ctx := ctxT(t, 5*time.Second)
	v, err := c.ServerVersion(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v != 41 { // Debian adb 1.0.41
		t.Fatalf("version = %d, want 41", v)
	}
	if _, err := c.Devices(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestUnknownSerialIsDeviceNotFound(t *testing.T) {
	c := adbServer(t)
	ctx := ctxT(t, 5*time.Second)
	_, err := c.GetState(ctx, "nope-serial")
	e := wantID(t, err, IDDeviceNotFound)
	if !e.Retryable {
		t.Error("device_not_found should be retryable")
	}
	_, err = c.Shell(ctx, "nope-serial", "echo hi")
	wantID(t, err, IDDeviceNotFound)
	_, err = c.Pull(ctx, "nope-serial", "/x", nil, nil)
	wantID(t, err, IDDeviceNotFound)
}

func TestServerDownIsNetworkError(t *testing.T) {
	c := New("127.0.0.1:" + strconv.Itoa(freePort(t)))
	_, err := c.ServerVersion(ctxT(t, 2*time.Second))
	e := wantID(t, err, IDNetworkError)
	if !e.Retryable {
		t.Error("network_error should be retryable")
	}
}

func TestDeadlineAndCancelOnHungServer(t *testing.T) {
	port, accepted := silentListenerAccepts(t)
	c := New("127.0.0.1:" + strconv.Itoa(port))
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	_, err := c.ServerVersion(ctx)
	wantID(t, err, IDTimeout)
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("deadline not honoured: returned after %v", d)
	}

	<-accepted // the first call's connection
	ctx2, cancel2 := context.WithCancel(context.Background())
	go func() { <-accepted; cancel2() }() // Devices is connected and waits for the server's answer
	start = time.Now()
	_, err = c.Devices(ctx2)
	wantID(t, err, IDCanceled)
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("cancel not honoured: returned after %v", d)
	}
}

// TestTrackDevicesSeesOfflineConnectEntry: an `adb connect`-ed peer that never
// completes the handshake is listed as offline by track-devices-l, calls to it
// fail with device_offline, and the entry leaves the list on disconnect. The same
// server state shows gadb v0.1.0's DeviceList dropping the offline device.
func TestTrackDevicesSeesOfflineConnectEntry(t *testing.T) {
	c := adbServer(t)
	ctx := ctxT(t, 15*time.Second)
	port := silentListener(t)
	serial := "127.0.0.1:" + strconv.Itoa(port)

	tr, err := c.TrackDevices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if _, err := tr.Next(); err != nil { // initial list
		t.Fatal(err)
	}
	go func() { _, _ = c.Connect(ctx, serial) }()
	waitFor := func(pred func([]parse.DeviceInfo) bool) []parse.DeviceInfo {
		t.Helper()
		for {
			list, err := tr.Next()
			if err != nil {
				t.Fatal(err)
			}
			if pred(list) {
				return list
			}
		}
	}
	find := func(list []parse.DeviceInfo) *parse.DeviceInfo {
		for i := range list {
			if list[i].Serial == serial {
				return &list[i]
			}
		}
		return nil
	}
	list := waitFor(func(l []parse.DeviceInfo) bool { return find(l) != nil })
	d := find(list)
	if d.State != parse.StateOffline || d.TransportID == 0 {
		t.Fatalf("tracked entry = %+v, want offline with a transport_id", *d)
	}

	all, err := c.Devices(ctx)
	if err != nil || find(all) == nil || find(all).State != parse.StateOffline {
		t.Fatalf("Devices = %+v, %v; want %s offline", all, err, serial)
	}
	_, err = c.Shell(ctx, serial, "true")
	wantID(t, err, IDDeviceOffline)
	_, err = c.GetState(ctx, serial)
	wantID(t, err, IDDeviceOffline)
	// gadb measurement: DeviceSerialList sees the entry, DeviceList drops it.
	g, err := gadb.NewClientWith("127.0.0.1", srvPort)
	if err != nil {
		t.Fatal(err)
	}
	serials, err := g.DeviceSerialList()
	if err != nil {
		t.Fatal(err)
	}
	gdevs, err := g.DeviceList()
	if err != nil {
		t.Fatal(err)
	}
	inSerials := false
	for _, s := range serials {
		inSerials = inSerials || s == serial
	}
	inList := false
	for _, d := range gdevs {
		inList = inList || d.Serial() == serial
	}
	if !inSerials || inList {
		t.Fatalf("gadb: DeviceSerialList has it=%v, DeviceList has it=%v; measured before: true,false", inSerials, inList)
	}

	if err := c.Disconnect(ctx, serial); err != nil {
		t.Fatal(err)
	}
	waitFor(func(l []parse.DeviceInfo) bool { return find(l) == nil })
	if err := c.ReconnectOffline(ctx); err != nil {
		t.Fatalf("reconnect offline: %v", err)
	}
}

func TestTrackerEndsOnCancel(t *testing.T) {
	c := adbServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	tr, err := c.TrackDevices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Next(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := tr.Next(); done <- err }()
	// Cancel only once Next is parked reading the socket (a polled state):
	// the cancel must wake a blocked read, not just fail a read not begun.
	waitBlockedIn(t, "adb.(*Tracker).Next")
	cancel()
	select {
	case err := <-done:
		wantID(t, err, IDCanceled)
	case <-time.After(2 * time.Second):
		t.Fatal("Next did not return after cancel")
	}
}

func TestForwardListEmptyAndErrors(t *testing.T) {
	c := adbServer(t)
	ctx := ctxT(t, 5*time.Second)
	if _, err := c.ForwardList(ctx); err != nil {
		t.Fatal(err)
	}
	_, err := c.Forward(ctx, "nope-serial", "tcp:0", "tcp:6790")
	wantID(t, err, IDDeviceNotFound)
}

// waitBlockedIn polls the goroutine dump until a goroutine whose stack holds
// fn waits on the network poller ("[IO wait]"), or fails after 5 s.
func waitBlockedIn(t *testing.T, fn string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	buf := make([]byte, 1<<20)
	for time.Now().Before(deadline) {
		n := runtime.Stack(buf, true)
		for _, g := range strings.Split(string(buf[:n]), "\n\n") {
			if strings.Contains(g, "[IO wait") && strings.Contains(g, fn) {
				return
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatalf("no goroutine blocked reading in %s after 5 s", fn)
}
