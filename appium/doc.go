// Package appium is the Appium adapter: a W3C WebDriver client for the Appium 3
// server with the UiAutomator2 driver (Client, which implements device.Driver),
// the capability set the agent uses on a shared host (Capabilities), and a
// local Appium server for single-host use and tests (StartServer).
//
// Every failure leaves this package as an *agent.Error, classified once here:
//
//	connection refused / reset / EOF, 502-504 without a W3C body -> appium_unreachable (retryable)
//	any W3C error answering POST /session                         -> session_create_failed, Code = the W3C error
//	                                                                 ("invalid argument" is not retryable)
//	"invalid session id" (HTTP 404)                               -> invalid_request_error, Code "invalid session id";
//	                                                                 IsSessionGone reports it
//	a deadline (the caller's or the client's default), "timeout"  -> timeout
//	the caller's cancellation                                     -> interrupted
//	"unknown error: Potentially insecure feature …"               -> permission_error (server lacks --allow-insecure)
//	other "unknown error"                                         -> process_error, Code "unknown error"
//	any other W3C error                                           -> internal_error, Code = the W3C error
//
// The W3C error bodies the unit tests use are real answers of Appium 3.8.0 with
// the uiautomator2 driver 8.7.0, captured on this machine (testdata/).
package appium
