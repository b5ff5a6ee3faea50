package httpapi_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/httpapi"
)

func TestLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:7420": true, "127.0.0.2:7420": true, "[::1]:7420": true, "localhost:7420": true, "[::ffff:127.0.0.1]:1": true,
		"0.0.0.0:7420": false, ":7420": false, "[::]:7420": false, "192.168.1.5:7420": false, "10.0.0.1:1": false, "[fe80::1]:1": false,
	} {
		got, err := httpapi.Loopback(context.Background(), addr)
		if err != nil || got != want {
			t.Errorf("Loopback(%q) = %v, %v; want %v", addr, got, err, want)
		}
	}
	if _, err := httpapi.Loopback(context.Background(), "no-port"); err == nil {
		t.Error("Loopback of an address without a port: no error")
	}
}

func TestCheckExposure(t *testing.T) {
	asked := 0
	tokens := func(has bool) func(context.Context) (bool, error) {
		return func(context.Context) (bool, error) { asked++; return has, nil }
	}
	loop := []httpapi.Listen{{"--listen", "127.0.0.1:7420"}, {"--nats-listen", "localhost:4222"}}
	if open, err := httpapi.CheckExposure(context.Background(), loop, tokens(false), false); err != nil || len(open) != 0 || asked != 0 {
		t.Errorf("loopback only: %v %v (store asked %d times)", open, err, asked)
	}
	wide := []httpapi.Listen{{"--listen", "127.0.0.1:7420"}, {"--nats-listen", "0.0.0.0:4222"}}
	_, err := httpapi.CheckExposure(context.Background(), wide, tokens(false), false)
	var ae *agent.Error
	if !errors.As(err, &ae) || ae.ID != agent.ErrInvalidRequest || ae.Code != httpapi.CodeOpenListen ||
		!strings.Contains(ae.Msg, "--nats-listen 0.0.0.0:4222") || strings.Contains(ae.Msg, "--listen 127") {
		t.Errorf("0.0.0.0 without tokens: %v", err)
	}
	if open, err := httpapi.CheckExposure(context.Background(), wide, tokens(true), false); err != nil || len(open) != 1 {
		t.Errorf("0.0.0.0 with tokens: %v %v", open, err)
	}
	if open, err := httpapi.CheckExposure(context.Background(), wide, tokens(false), true); err != nil || len(open) != 1 || open[0].Flag != "--nats-listen" {
		t.Errorf("0.0.0.0 with --insecure-no-auth: %v %v", open, err)
	}
	// A name that does not resolve cannot be shown loopback: refused.
	if _, err := httpapi.CheckExposure(context.Background(), []httpapi.Listen{{"--listen", "no-such-host.invalid:7420"}}, tokens(true), false); !errors.As(err, &ae) || ae.Code != httpapi.CodeOpenListen {
		t.Errorf("unresolvable name: %v", err)
	}
}
