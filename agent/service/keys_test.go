package service_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/service"
)

// identities is a DeviceIdentity over a table: serial -> id ("" = the
// device does not answer yet); serials not in it are no device.
type identities map[string]string

func (m identities) DeviceID(_ context.Context, serial string) (string, error) {
	id, ok := m[serial]
	switch {
	case !ok:
		return "", fmt.Errorf("%s: %w", serial, service.ErrNoDevice)
	case id == "":
		return "", errors.New("not answering yet")
	}
	return id, nil
}

// A connected device is keyed by its identity, whichever host asks; a name
// no device has (an AVD to boot) by the host; a device that does not answer
// yet is an error, never a key of another shape. "<id>/<serial>" is this
// process's name for its device of that identity or its host's, and
// refused otherwise.
func TestKeys(t *testing.T) {
	ctx := context.Background()
	ids := identities{"emulator-5554": "0a1b2c3d4e5f", "emulator-5556": ""}
	onA := service.Keys{HostID: "aaaaaaaaaaaa", Identity: ids}
	onB := service.Keys{HostID: "bbbbbbbbbbbb", Identity: ids}
	ka, errA := onA.Key(ctx, "emulator-5554")
	kb, errB := onB.Key(ctx, "emulator-5554")
	if errA != nil || errB != nil || ka != kb || ka != "0a1b2c3d4e5f/emulator-5554" {
		t.Fatalf("one device keyed %q (%v) on host A and %q (%v) on host B", ka, errA, kb, errB)
	}
	if k, err := onA.Key(ctx, "Pixel_7"); err != nil || k != agent.DeviceKey("aaaaaaaaaaaa", "Pixel_7") {
		t.Errorf("AVD to boot keyed %q, %v", k, err)
	}
	if k, err := onA.Key(ctx, "emulator-5556"); err == nil {
		t.Errorf("a device not answering keyed %q", k)
	}
	if k, _ := (service.Keys{HostID: "aaaaaaaaaaaa"}).Key(ctx, "emulator-5554"); k != "aaaaaaaaaaaa/emulator-5554" {
		t.Errorf("without Identity: %q", k)
	}
	for name, want := range map[string]string{
		"0a1b2c3d4e5f/emulator-5554": "emulator-5554", // its identity
		"aaaaaaaaaaaa/emulator-5554": "emulator-5554", // the host's id
		"aaaaaaaaaaaa/Pixel_7":       "Pixel_7",
		"emulator-5554":              "emulator-5554",
		"ffffffffffff/emulator-5554": "", // another device of that serial
		"0a1b2c3d4e5f/emulator-5556": "", // another serial
		"bbbbbbbbbbbb/Pixel_7":       "", // another host's AVD
	} {
		got, err := onA.Local(ctx, name)
		if want == "" {
			if agent.Classify(err).ID != agent.ErrInvalidRequest {
				t.Errorf("Local(%q) = %q, %v; want invalid_request_error", name, got, err)
			}
			continue
		}
		if err != nil || got != want {
			t.Errorf("Local(%q) = %q, %v; want %q", name, got, err, want)
		}
	}
}

// A device's id selects it (the id GET /v1/devices shows), as does the
// host's id; another id of the same serial does not.
func TestMatchesDeviceID(t *testing.T) {
	c := service.Candidate{Serial: "emulator-5554", ID: "0a1b2c3d4e5f"}
	for name, want := range map[string]bool{
		"0a1b2c3d4e5f/emulator-5554": true,
		"aaaaaaaaaaaa/emulator-5554": true,
		"ffffffffffff/emulator-5554": false,
		"0a1b2c3d4e5f/emulator-5556": false,
	} {
		if got := c.Matches(name, "aaaaaaaaaaaa"); got != want {
			t.Errorf("Matches(%q) = %v, want %v", name, got, want)
		}
	}
}
