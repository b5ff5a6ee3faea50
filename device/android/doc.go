// Package android reads what an Android device answers to the shell
// commands the setup nodes ask (foreground activity, launcher activity,
// installed package state, boot readiness, the app's uid), over the
// device.Device port, with the parsers of adb/parse. It reaches no
// transport: the nodes pass it their device port.
package android
