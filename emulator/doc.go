// Package emulator drives the real Android emulator the way Android Studio and
// CI runners do, through its command line and its console:
//
//   - the SDK: $ANDROID_SDK_ROOT, else $ANDROID_HOME, holds emulator/emulator;
//     Config.Command (or $SCREENGRAPH_EMULATOR) replaces it, so tests run the
//     simulated emulator (emulator/sim) in its place;
//   - AVDs: `emulator -list-avds`; an AVD's config.ini read from
//     $ANDROID_AVD_HOME, $ANDROID_SDK_HOME/avd, $ANDROID_USER_HOME/avd or
//     ~/.android/avd (NAME.ini's path= first);
//   - boot (Manager.Boot): `emulator -avd NAME -port P -no-window -no-audio
//     -no-boot-anim` plus -no-snapshot-save (CI) or -read-only (another
//     instance of a running AVD), on a free even port pair (console P, adb
//     P+1, serial emulator-P); output to a log file the manager reads for
//     "Successfully loaded snapshot" (quick boot), a failed snapshot load (the
//     reason; a process that exits on it is started again with
//     -no-snapshot-load, a cold boot) and "Boot completed in N ms"; a writable
//     boot refused because another instance holds the AVD's lock is started
//     again with -read-only; boot-ready
//     as EnsureDevice judges it (adb.BootCommand + `service list`,
//     parse.ParseBootStatus), polled every 50 ms within a bounded wait that
//     reports progress; an emulator process that exits before it is ready is
//     process_error, Code EMULATOR_CRASHED, with its last log lines;
//   - the console on port P (Console): the banner, `auth` with
//     ~/.emulator_console_auth_token, `avd name` (which AVD emulator-P is),
//     `avd snapshot list|save|load`, `kill`; Manager.Stop falls back to
//     `adb -s emulator-P emu kill` and then to the process;
//   - emulators the manager booted are kept in a state file with their last
//     use, so the next run reuses a warm one and Reap kills those idle longer
//     than the policy allows.
//
// Errors are *agent.Error: boot_timeout, process_error (EMULATOR_NOT_FOUND,
// EMULATOR_CRASHED, EMULATOR_EXITED, AVD_UNKNOWN), device_not_found,
// permission_error (console auth), network_error (console unreachable).
package emulator
