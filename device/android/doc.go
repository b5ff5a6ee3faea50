// Package android reads what an Android device answers to the shell
// commands the setup nodes ask (foreground activity, launcher activity,
// installed package state, boot readiness and adb state, the app's uid, an
// idle sample's signals, a launch's am output, a system dialog dismissed,
// the installed base APK), over the device.Device port, with the parsers of
// adb/parse; and Android's own rules the nodes check against (package and
// activity names, a new Appium session's capabilities). It reaches no
// transport: the nodes pass it their device port.
package android
