// Package sim is the simulated Android emulator: a Go process that speaks the
// device side of the ADB transport protocol (CNXN, or AUTH while the host's key
// is not accepted; OPEN/OKAY/WRTE/CLSE streams with adbd's flow control;
// shell: and shell,v2, exec:, sync:, tcp:), is found by the adb server the way
// a real emulator is (adb port P+1, registered with `host:emulator:<port>`,
// listed as emulator-P), serves the emulator console on port P, and injects
// faults (offline periods, dropped connections, slow replies, unauthorized,
// crash). The device model behind it is emulator/sim/android.
//
// # In place of the SDK's emulator binary
//
// RunEmulator (`screengraph-agent emulator sim -avd NAME ...`, or the small
// binary emulator/sim/cmd/emulator that simtest.BuildEmulator builds as
// <sdk>/emulator/emulator) takes the real binary's single-dash flags: -avd NAME
// (or @NAME), -port P (console P, adb P+1, serial emulator-P; without it the
// first free pair from 5554), -no-window, -no-audio, -no-boot-anim, -read-only,
// -no-snapshot-save, -no-snapshot-load, -no-snapshot, -wipe-data, -gpu MODE,
// -accel MODE, -list-avds; other real flags are accepted and ignored (those
// taking a value with their value), -qemu ends the emulator's options.
//
//   - AVDs: $ANDROID_AVD_HOME, else $ANDROID_SDK_HOME/avd, else
//     $HOME/.android/avd holds NAME.ini (path= the NAME.avd directory) and
//     NAME.avd/config.ini, as avdmanager writes them (simtest.CreateAVD).
//     image.sysdir.1 (or target) gives the API level; hw.lcd.width, height and
//     density the display; the key screengraph.simProfile (ours) names the
//     device profile, a shipped one (fixtures/profiles) or a file relative to
//     NAME.avd; "default" when absent.
//   - Lock: a writable instance holds NAME.avd/hardware-qemu.ini.lock (its pid);
//     a second one exits 1 with the real "Running multiple emulators with the
//     same AVD" lines. -read-only instances take no lock, never save snapshots
//     and refuse `avd snapshot save|load|delete` on the console.
//   - Boot: a quick boot when NAME.avd/snapshots/default_boot exists and
//     neither -no-snapshot-load, -no-snapshot nor -wipe-data is given (it logs
//     "Successfully loaded snapshot 'default_boot'"); the profile's
//     quickBootDuration then sets when sys.boot_completed turns 1, else its
//     coldBootDuration (or bootDuration). faults.snapshotLoadFails makes the
//     quick boot fail: "WARNING | Cold boot: snapshot failed to load", the
//     snapshot deleted, a cold boot. "Boot completed in N ms" is logged.
//   - Exit: SIGINT/SIGTERM or the console's `kill` (`adb emu kill`) end the
//     process with 0, saving default_boot unless -no-snapshot-save,
//     -no-snapshot or -read-only; faults.crashAfter kills the process with
//     SIGKILL instead (no snapshot, the lock left behind: the next start takes
//     the stale lock over).
//   - User data: packages the user installed (adb install) are kept in
//     NAME.avd/screengraph-userdata/<package>.apk at exit and installed again
//     at the next start, as a real AVD's userdata partition keeps them;
//     -wipe-data deletes them, -read-only does not write them back.
//   - adb: registers with 127.0.0.1:$ANDROID_ADB_SERVER_PORT (5037 by
//     default); faults.unauthorizedFor makes `adb devices` show "unauthorized"
//     for that long (for ever when negative), then "device".
//   - Console: banner, `auth <token>` against $HOME/.emulator_console_auth_token
//     (created at start-up when missing; an empty file turns auth off), help,
//     help-verbose, ping, avd name|status|snapshot list|save|load|del|delete,
//     kill, quit; every other real command answers KO. Texts are the real
//     console's (fixtures/captures/console, cited in SOURCES.md).
//
// Log lines follow the real emulator's "LEVEL   | message" form on stdout.
package sim
