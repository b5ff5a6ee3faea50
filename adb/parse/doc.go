// Package parse holds the pure parsers of Android shell and adb server output:
// getprop and boot status, `pm list packages` / `pm path` / `dumpsys package`,
// `dumpsys window` / `dumpsys activity`, `am start`, `pm install`, gfxinfo and
// framestats, `wm size`, logcat threadtime lines, crashes and ANRs, dropbox,
// raw screencap headers, and `host:devices-l`. No transport: it reads strings
// and bytes only, so nodes/ uses it without the adb client (package adb, which
// uses it too). Each parser is tested on real captured outputs
// (fixtures/captures) and fuzzed (testdata/fuzz holds the corpora).
//
// Error is the device error taxonomy (DESIGN.md "Errors") that the parsers and
// the adb transport return alike (adb.Error is an alias of it).
package parse
