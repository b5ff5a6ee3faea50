// Package uia2 is the simulated in-device UiAutomator2 server: what
// io.appium.uiautomator2.server (v10.6.6, the version the uiautomator2 driver 8.7.0
// installs) serves on device port 6790, so that the real Appium server with the
// real uiautomator2 driver can create a session, read the page source, find and
// click elements and delete the session on the simulated emulator.
//
// Everything here is modelled on the real server, not on the W3C spec alone:
//   - Routes: the route strings compiled into the v10.6.6 APK
//     (appium-uiautomator2-server-v10.6.6.apk, classes11.dex, AppiumServlet), served
//     with or without the legacy "/wd/hub" prefix, which the real ServerHandler strips
//     (classes10.dex, ServerHandler.channelRead, LEGACY_URI_PREFIX). The driver's
//     WebDriverProxy uses base path "" (appium/base-driver DEFAULT_BASE_PATH), so it
//     calls "/status", "/session", "/session/{id}/…".
//   - Envelope: {"sessionId":…,"value":…}; errors {"value":{"error","message","stacktrace"}}
//     with the HTTP status of the real exception class (AppiumResponse.renderTo and
//     common/exceptions/*.getError/getHttpStatus in the APK). A route no servlet
//     handles gets UnknownCommandException: 404 "unknown command".
//   - Page source: AccessibilityNodeInfoDumper + UiElementSnapshot.SUPPORTED_ATTRIBUTES
//     (attribute order read from the APK's static initializer) written the way
//     Android's org.kxml2.io.KXmlSerializer writes with indent-output ("\r\n" plus two
//     spaces per level, " />" for empty elements). See source.go.
//
// Commands the driver answers itself (current activity/package through adb,
// timeouts, window rect) have no route in the real server; here too they get
// "unknown command".
package uia2
