package agent

import "context"

// Handover prepares a device for the run about to drive it under a lease
// (issue 22): when the device's previous lease belonged to another tenant's
// run, or to a run no longer known, it resets the device (the previous
// run's app force-stopped, system dialogs dismissed, the home screen in
// front) and reads the device clock that starts the run's evidence window.
// The engine calls it once per Engine.Run, before the first step, with the
// lease's Fence; it commits Result.Reset as an agent.device.reset event.
// It never fails the run: a reset that fails is reported in the payload and
// leaves the window Dirty.
type Handover interface {
	Handover(ctx context.Context, req HandoverRequest) HandoverResult
}

// HandoverRequest names the run and the lease it holds.
type HandoverRequest struct {
	Run   Run
	Fence Fence
}

// HandoverResult is the run's evidence window and, when the device was
// reset (or a reset was due), the event payload saying so.
type HandoverResult struct {
	Window EvidenceWindow
	// Reset is nil when no reset was due (the previous lease was this
	// tenant's, or the device had none).
	Reset *DeviceResetPayload
}

// Reasons of DeviceResetPayload.Reason.
const (
	// ResetTenantChange: the previous lease was another tenant's run.
	ResetTenantChange = "tenant_change"
	// ResetPreviousUnknown: the previous lease's run is gone (pruned), so
	// whose it was is not known.
	ResetPreviousUnknown = "previous_run_unknown"
	// ResetPreviousFailed: a reset due before (for an earlier run) failed,
	// so the device may still hold another tenant's run.
	ResetPreviousFailed = "previous_reset_failed"
)

// DeviceResetPayload is agent.device.reset's payload. It names no other
// tenant, run or package: only what was done, counted.
type DeviceResetPayload struct {
	PayloadBase
	Serial string `json:"serial"`
	// Reason is ResetTenantChange, ResetPreviousUnknown or ResetPreviousFailed.
	Reason string `json:"reason"`
	// StoppedApps counts the previous run's apps force-stopped
	// (`am force-stop`); WentHome: KEYCODE_HOME was sent, which also
	// dismisses crash and ANR dialogs (PhoneWindowManager sends
	// ACTION_CLOSE_SYSTEM_DIALOGS; BaseErrorDialog closes on it).
	StoppedApps int  `json:"stoppedApps"`
	WentHome    bool `json:"wentHome"`
	// Outcome is SUCCESS or FAILURE; a failure has its errorId and summary.
	Outcome                     OutcomeStatus `json:"outcome"`
	ErrorID                     *ErrorID      `json:"errorId,omitempty"`
	HumanReadableFailureSummary string        `json:"humanReadableFailureSummary,omitempty"`
	// DeviceTime is the device clock after the reset (ISO-8601 UTC): the
	// start of the run's evidence window. "" when it could not be read.
	DeviceTime     string `json:"deviceTime,omitempty"`
	DurationMillis int64  `json:"durationMillis"`
}
