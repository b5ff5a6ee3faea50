package cli

import (
	"slices"
	"testing"
)

func TestSeparateEmulatorFlags(t *testing.T) {
	for _, c := range []struct{ in, want []string }{
		{[]string{"sga", "emulator", "sim", "-avd", "P", "-port", "5554", "-no-window"},
			[]string{"sga", "emulator", "sim", "--", "-avd", "P", "-port", "5554", "-no-window"}},
		{[]string{"sga", "--log-level", "debug", "emulator", "sim", "@P"},
			[]string{"sga", "--log-level", "debug", "emulator", "sim", "--", "@P"}},
		{[]string{"sga", "emulator", "sim", "-list-avds"}, []string{"sga", "emulator", "sim", "--", "-list-avds"}},
		{[]string{"sga", "emulator", "sim", "--count", "2", "--port", "5560"}, []string{"sga", "emulator", "sim", "--count", "2", "--port", "5560"}},
		{[]string{"sga", "emulator", "sim", "--", "-avd", "P"}, []string{"sga", "emulator", "sim", "--", "-avd", "P"}},
		{[]string{"sga", "run", "-avd"}, []string{"sga", "run", "-avd"}},
	} {
		if got := SeparateEmulatorFlags(c.in); !slices.Equal(got, c.want) {
			t.Errorf("%q: got %q, want %q", c.in, got, c.want)
		}
	}
}
