package policy

import "testing"

func TestEmulatorPolicyDefaultsAndParse(t *testing.T) {
	d := Default().Emulator
	if d.IdleKillMinutes != 30 || !d.QuickBoot || d.SaveSnapshot {
		t.Errorf("defaults %+v", d)
	}
	p, err := Parse([]byte("version: 2\nemulator: {idleKillMinutes: 5}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p.Emulator.IdleKillMinutes != 5 || !p.Emulator.QuickBoot {
		t.Errorf("parsed over defaults: %+v", p.Emulator)
	}
	if _, err := Parse([]byte("version: 2\nemulator: {idleKillMinutes: -1}\n")); err == nil {
		t.Error("negative idleKillMinutes accepted")
	}
	if _, err := Parse([]byte("version: 2\nemulator: {keepWarmish: true}\n")); err == nil {
		t.Error("unknown emulator key accepted")
	}
}
