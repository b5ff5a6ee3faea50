// Reads a device's logcat and screenshot through appium-adb, the library
// Appium uses against real devices: its logcat capture (`adb logcat -v
// threadtime`, streamed) and takeScreenshot (`adb exec-out screencap -p`).
// Prints one JSON object; the Go test (emulator/sim) checks it against the
// simulator. Usage: node appium-adb-evidence.mjs <adbPort> <serial> <component> <waitFor>
import {ADB} from 'appium-adb';

const [adbPort, serial, component, waitFor] = process.argv.slice(2);
const adb = await ADB.createADB({adbPort: Number(adbPort), suppressKillServer: true, adbExecTimeout: 60000});
adb.setDeviceId(serial);
await adb.startLogcat({format: 'threadtime'});
await adb.shell(['am', 'start', '-n', component]);
const deadline = Date.now() + 30000;
const lines = [];
for (;;) {
  // getLogcatLogs returns the entries since its previous call.
  lines.push(...adb.getLogcatLogs().map((e) => e.message));
  if (lines.some((l) => l.includes(waitFor)) || Date.now() > deadline) {
    break;
  }
  await new Promise((r) => setTimeout(r, 100)); // poll appium-adb's buffer
}
const png = await adb.takeScreenshot();
await adb.stopLogcat();
process.stdout.write(JSON.stringify({lines, png: png.toString('base64')}) + '\n');
