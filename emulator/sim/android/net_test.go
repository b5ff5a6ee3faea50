package android

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"syscall"
	"testing"
)

func TestInDeviceTCP(t *testing.T) {
	d, _ := newTestDevice(t, Profile{})
	if _, err := d.DialTCP(context.Background(), 6790); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial with no listener: %v", err)
	}
	l, err := d.Listen(6790)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Listen(6790); !errors.Is(err, syscall.EADDRINUSE) {
		t.Errorf("second listen: %v", err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "status ok") })}
	go srv.Serve(l)
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return d.DialTCP(ctx, 6790) }}}
	resp, err := client.Get("http://127.0.0.1:6790/status")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "status ok" {
		t.Errorf("body %q", body)
	}
	if ports := d.tcpListeners(); len(ports) != 1 || ports[0] != 6790 {
		t.Errorf("listeners %v", ports)
	}
	client.CloseIdleConnections()
	l.Close()
	if _, err := d.DialTCP(context.Background(), 6790); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial after close: %v", err)
	}
}
