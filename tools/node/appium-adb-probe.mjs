// Reads a device through appium-adb, the library Appium itself uses against
// real devices, and prints what it concluded as one JSON object. The Go
// integration test (emulator/sim) compares each answer with the simulator's state.
// Usage: node appium-adb-probe.mjs <adbPort> <serial> <apkPath> <installedPkg> <apkPkg>
import {ADB} from 'appium-adb';

const [adbPort, serial, apk, installedPkg, apkPkg] = process.argv.slice(2);
const adb = await ADB.createADB({adbPort: Number(adbPort), suppressKillServer: true, adbExecTimeout: 60000});
adb.setDeviceId(serial);
const out = {};
out.apiLevel = await adb.getApiLevel();
out.platformVersion = await adb.getPlatformVersion();
out.installedBefore = await adb.isAppInstalled(apkPkg);
out.installedPkgInfo = await adb.getPackageInfo(installedPkg);
await adb.install(apk, {replace: true, timeout: 60000});
out.installedAfter = await adb.isAppInstalled(apkPkg);
out.apkPkgInfo = await adb.getPackageInfo(apkPkg);
out.focused = await adb.getFocusedPackageAndActivity();
out.shellEcho = await adb.shell(['echo', 'hello from appium-adb']);
try {
  await adb.shell(['exit', '3']);
  out.shellExit3 = 'no error';
} catch (e) {
  out.shellExit3 = `error: ${e.message.split('\n')[0]}`;
}
process.stdout.write(JSON.stringify(out) + '\n');
