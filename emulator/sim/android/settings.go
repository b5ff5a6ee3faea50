package android

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// settingsNamespaces are the tables of `settings`.
var settingsNamespaces = map[string]bool{"global": true, "secure": true, "system": true}

// defaultSettings are the values a fresh Google emulator image has for the
// keys tools read (animation scales, adb, stay-on, the default IME).
func defaultSettings(p Profile) map[string]map[string]string {
	return map[string]map[string]string{
		"global": {
			"adb_enabled": "1", "development_settings_enabled": "1", "device_provisioned": "1",
			"window_animation_scale": "1.0", "transition_animation_scale": "1.0", "animator_duration_scale": "1.0",
			"airplane_mode_on": "0", "wifi_on": "1", "mobile_data": "1", "stay_on_while_plugged_in": "0",
			"package_verifier_enable": "1", "verifier_verify_adb_installs": "0", "hidden_api_policy": "null",
		},
		"secure": {
			"android_id":                  "1c2b3a4d5e6f7081",
			"default_input_method":        "com.google.android.inputmethod.latin/com.android.inputmethod.latin.LatinIME",
			"enabled_input_methods":       "com.google.android.inputmethod.latin/com.android.inputmethod.latin.LatinIME",
			"location_mode":               "3",
			"user_setup_complete":         "1",
			"show_ime_with_hard_keyboard": "0",
		},
		"system": {
			"screen_off_timeout": "60000", "screen_brightness": "102", "font_scale": "1.0",
			"accelerometer_rotation": "1", "user_rotation": "0",
		},
	}
}

// settings get|put|delete|list NAMESPACE [KEY [VALUE]] (SettingsService's
// shell command): get of an unset key prints "null"; put is silent; delete
// prints "Deleted N rows"; list prints "key=value" lines sorted by key.
func cmdSettings(c *Ctx) int {
	args := c.Args[1:]
	for len(args) > 0 && strings.HasPrefix(args[0], "--") {
		if args[0] == "--user" && len(args) > 1 {
			args = args[1:]
		}
		args = args[1:]
	}
	usage := func() int {
		fmt.Fprintln(c.Stderr, "Invalid command: "+strings.Join(c.Args[1:], " "))
		return 1
	}
	if len(args) < 2 {
		return usage()
	}
	verb, ns := args[0], args[1]
	if !settingsNamespaces[ns] {
		return usage()
	}
	d := c.Device
	d.mu.Lock()
	defer d.mu.Unlock()
	table := d.settings[ns]
	switch verb {
	case "get":
		if len(args) < 3 {
			return usage()
		}
		v, ok := table[args[2]]
		if !ok {
			v = "null"
		}
		fmt.Fprintln(c.Stdout, v)
	case "put":
		if len(args) < 4 {
			return usage()
		}
		table[args[2]] = args[3]
	case "delete":
		if len(args) < 3 {
			return usage()
		}
		_, ok := table[args[2]]
		delete(table, args[2])
		n := 0
		if ok {
			n = 1
		}
		fmt.Fprintf(c.Stdout, "Deleted %d rows\n", n)
	case "list":
		keys := make([]string, 0, len(table))
		for k := range table {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(c.Stdout, "%s=%s\n", k, table[k])
		}
	default:
		return usage()
	}
	return 0
}

// setting returns a setting's value ("" when unset). Takes d.mu.
func (d *Device) setting(ns, key string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.settings[ns][key]
}

// windowCommands lets other files add `wm`/`cmd window` subcommands
// (dismiss-keyguard, …); argv[0] is the subcommand.
var windowCommands = map[string]Command{}

func registerWindowCommand(sub string, fn Command) { windowCommands[sub] = fn }

// cmdWm is /system/bin/wm, a script running `cmd window "$@"` on API 29+.
func cmdWm(c *Ctx) int {
	sub := *c
	sub.Args = append([]string{"cmd", "window"}, c.Args[1:]...)
	return cmdCmd(&sub)
}

// cmdWindow is the window service's shell command: size and density print
// "Physical size: WxH" / "Physical density: N" and, once overridden,
// "Override size: …" / "Override density: …" (WindowManagerShellCommand).
func cmdWindow(c *Ctx) int {
	args := c.Args[1:]
	if len(args) == 0 {
		fmt.Fprintln(c.Stdout, "Window manager (window) commands:")
		return 0
	}
	d := c.Device
	p := d.profile
	switch args[0] {
	case "size":
		if len(args) > 1 {
			d.mu.Lock()
			defer d.mu.Unlock()
			if args[1] == "reset" {
				delete(d.settings["global"], "display_size_forced")
				return 0
			}
			w, h, ok := strings.Cut(args[1], "x")
			if _, e1 := strconv.Atoi(w); e1 != nil || !ok {
				fmt.Fprintf(c.Stderr, "Error: bad size %s\n", args[1])
				return 255
			}
			if _, e2 := strconv.Atoi(h); e2 != nil {
				fmt.Fprintf(c.Stderr, "Error: bad size %s\n", args[1])
				return 255
			}
			d.settings["global"]["display_size_forced"] = args[1]
			return 0
		}
		fmt.Fprintf(c.Stdout, "Physical size: %dx%d\n", p.DisplayWidth, p.DisplayHeight)
		if o := d.setting("global", "display_size_forced"); o != "" {
			fmt.Fprintf(c.Stdout, "Override size: %s\n", o)
		}
		return 0
	case "density":
		if len(args) > 1 {
			d.mu.Lock()
			defer d.mu.Unlock()
			if args[1] == "reset" {
				delete(d.settings["secure"], "display_density_forced")
				return 0
			}
			if _, err := strconv.Atoi(args[1]); err != nil {
				fmt.Fprintf(c.Stderr, "Error: bad number %s\n", args[1])
				return 255
			}
			d.settings["secure"]["display_density_forced"] = args[1]
			return 0
		}
		fmt.Fprintf(c.Stdout, "Physical density: %d\n", p.Density)
		if o := d.setting("secure", "display_density_forced"); o != "" {
			fmt.Fprintf(c.Stdout, "Override density: %s\n", o)
		}
		return 0
	}
	if fn, ok := windowCommands[args[0]]; ok {
		sub := *c
		sub.Args = args
		return fn(&sub)
	}
	if args[0] == "dismiss-keyguard" {
		return 0 // no keyguard unless the am side models one
	}
	fmt.Fprintf(c.Stderr, "Unknown command: %s\n", args[0])
	return 255
}

func init() {
	registerCommand("settings", cmdSettings)
	registerCommand("wm", cmdWm)
	registerCmdService("window", cmdWindow)
	registerCmdService("settings", func(c *Ctx) int {
		sub := *c
		sub.Args = append([]string{"settings"}, c.Args[1:]...)
		return cmdSettings(&sub)
	})
}
