package evidence

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/device"
)

// Runs reads a run row (agent.Store's GetRun).
type Runs interface {
	GetRun(ctx context.Context, sc agent.Scope, runID string) (agent.Run, error)
}

// KV is the store's small key/value table (the stores' GetKV / PutKV; a
// missing key is agent.ErrNotFound, an empty value counts as none).
type KV interface {
	GetKV(ctx context.Context, key string) ([]byte, error)
	PutKV(ctx context.Context, key string, value []byte) error
}

// Handover implements agent.Handover over the lease history: a run whose
// device's previous lease was another tenant's run (or a run no longer
// stored) gets the device reset in one adb shell round trip,
//
//	am force-stop '<previous app>'; …; input keyevent 3; date +%s.%N
//
// (KEYCODE_HOME brings the launcher to the front, and PhoneWindowManager's
// home handling broadcasts ACTION_CLOSE_SYSTEM_DIALOGS, on which every
// crash and ANR dialog closes: BaseErrorDialog's receiver, AOSP
// services/core/java/com/android/server/am/BaseErrorDialog.java); any other
// run only reads the device clock (`date +%s.%N`, one round trip). The
// clock read after the reset starts the run's evidence window, so nothing
// the reset itself logged (the previous app's force-stop) falls inside it.
type Handover struct {
	Leases agent.Leases
	Runs   Runs
	// DeviceFor returns the device of an adb serial.
	DeviceFor func(serial string) device.Device
	// KV remembers a device whose due reset failed (key
	// "handover/unreset/<device key>", the packages still to stop), so the
	// next run resets it whoever's it is; nil remembers nothing.
	KV KV
	// Timeout bounds the round trip (default 10 s). The daemon's DeviceFor
	// has no reconnect grace here: an absent device fails the reset at once
	// and EnsureDevice waits for it.
	Timeout time.Duration
	// Logf reports a failed reset to the daemon's log too; may be nil.
	Logf func(format string, args ...any)
}

var _ agent.Handover = (*Handover)(nil)

// Handover implements agent.Handover.
func (h *Handover) Handover(ctx context.Context, req agent.HandoverRequest) agent.HandoverResult {
	timeout := h.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t0 := time.Now()
	devKey, reason, pkgs, unreset := h.plan(ctx, req)
	var res agent.HandoverResult
	var cmd strings.Builder
	if reason != "" {
		res.Reset = &agent.DeviceResetPayload{Serial: req.Fence.Serial, Reason: reason, Outcome: agent.OutcomeSuccess,
			StoppedApps: len(pkgs), WentHome: true}
		for _, p := range pkgs {
			cmd.WriteString("am force-stop " + shellWord(p) + "; ")
		}
		cmd.WriteString("input keyevent 3; ")
	}
	cmd.WriteString("date +%s.%N")
	r, err := h.DeviceFor(req.Fence.Serial).Shell(ctx, cmd.String())
	if err != nil {
		return h.failed(ctx, req, res, devKey, pkgs, t0, err)
	}
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	at, ok := epochTime(lines[len(lines)-1])
	if r.ExitCode != 0 || !ok {
		return h.failed(ctx, req, res, devKey, pkgs, t0, agent.Errorf(agent.ErrProcess, "the reset's clock read printed %q (exit %d)", firstBytes([]byte(lines[len(lines)-1])), r.ExitCode))
	}
	// logcat -T and dropbox compare at the millisecond or finer: the
	// window starts at the next whole millisecond, after every entry the
	// reset's own commands wrote.
	res.Window.Since = at.Truncate(time.Millisecond).Add(time.Millisecond)
	if res.Reset != nil {
		res.Reset.DeviceTime = agent.FormatTS(res.Window.Since)
		res.Reset.DurationMillis = time.Since(t0).Milliseconds()
		if unreset != nil {
			h.remember(ctx, devKey, nil)
		}
	}
	return res
}

// plan decides whether the device needs a reset (its reason, "" when not)
// and which apps to stop: the previous run's (due), and those a reset that
// failed before left (unreset, non-nil when one is still due).
func (h *Handover) plan(ctx context.Context, req agent.HandoverRequest) (devKey, reason string, pkgs, unreset []string) {
	devKey, reason, pkgs, err := h.due(ctx, req)
	if err != nil {
		// Whose run came before is unknown: reset, as for a pruned one.
		h.logf("run %s: device %s: reading its lease history: %v; resetting it", req.Run.RunID, req.Fence.Serial, err)
		reason, pkgs = agent.ResetPreviousUnknown, nil
	}
	// A reset that failed before is still due, with the apps it was to stop.
	unreset = h.unreset(ctx, devKey)
	if unreset != nil {
		if reason == "" {
			reason = agent.ResetPreviousFailed
		}
		for _, p := range unreset {
			if !slices.Contains(pkgs, p) {
				pkgs = append(pkgs, p)
			}
		}
	}
	return devKey, reason, pkgs, unreset
}

// failed is the result of a handover whose round trip failed: without a
// reset due, only the clock read failed (the window stays unknown: no
// logs); a reset that failed leaves the device dirty and is remembered,
// so the next run resets it whoever's it is.
func (h *Handover) failed(ctx context.Context, req agent.HandoverRequest, res agent.HandoverResult, devKey string, pkgs []string, t0 time.Time, err error) agent.HandoverResult {
	e := agent.Classify(err)
	reset := res.Reset
	if reset == nil {
		h.logf("run %s: device %s: reading the device clock: %v", req.Run.RunID, req.Fence.Serial, e)
		return res
	}
	res.Window.Dirty = true
	h.remember(ctx, devKey, append([]string{}, pkgs...))
	id := e.ID
	reset.Outcome, reset.ErrorID = agent.OutcomeFailure, &id
	reset.HumanReadableFailureSummary = agent.RedactString("device reset failed: " + e.Error())
	reset.DurationMillis = time.Since(t0).Milliseconds()
	h.logf("run %s: device %s: %s", req.Run.RunID, req.Fence.Serial, reset.HumanReadableFailureSummary)
	return res
}

func unresetKey(devKey string) string { return "handover/unreset/" + devKey }

// unreset returns the packages a failed reset of the device left to stop
// (non-nil, maybe empty, when one is due), nil when none is.
func (h *Handover) unreset(ctx context.Context, devKey string) []string {
	if h.KV == nil || devKey == "" {
		return nil
	}
	b, err := h.KV.GetKV(ctx, unresetKey(devKey))
	if err != nil || len(b) == 0 {
		return nil
	}
	pkgs := []string{}
	for _, p := range strings.Fields(string(b)) {
		if validPackage(p) && len(pkgs) < 16 {
			pkgs = append(pkgs, p)
		}
	}
	return pkgs
}

// remember records that the device still needs a reset stopping pkgs
// (nil: it needs none any more).
func (h *Handover) remember(ctx context.Context, devKey string, pkgs []string) {
	if h.KV == nil || devKey == "" {
		return
	}
	var v []byte
	if pkgs != nil {
		v = []byte(strings.Join(append([]string{"-"}, pkgs...), " ")) // "-": due, even with no package
	}
	if err := h.KV.PutKV(context.WithoutCancel(ctx), unresetKey(devKey), v); err != nil {
		h.logf("device %s: remembering its reset: %v", devKey, err)
	}
}

func (h *Handover) logf(format string, args ...any) {
	if h.Logf != nil {
		h.Logf(format, args...)
	}
}

// due decides whether the device needs a reset (its reason, "" when not)
// and which apps of the previous run to stop: the previous lease of the
// lease's device, older than the lease (a smaller fencing token). A store
// error is returned (the caller then resets).
func (h *Handover) due(ctx context.Context, req agent.HandoverRequest) (devKey, reason string, pkgs []string, err error) {
	cur, err := h.Leases.LeasePage(ctx, agent.Admin(), agent.LeaseQuery{RunID: req.Run.RunID, Before: req.Fence.Token + 1, Limit: 1})
	if err != nil {
		return "", "", nil, err
	}
	if len(cur) == 0 || cur[0].FencingToken != req.Fence.Token {
		// Not the lease the run holds: nothing to compare with; reset.
		return "", agent.ResetPreviousUnknown, nil, nil
	}
	devKey = cur[0].Device
	prev, err := h.Leases.LeasePage(ctx, agent.Admin(), agent.LeaseQuery{Device: devKey, Before: req.Fence.Token, Limit: 1})
	if err != nil {
		return devKey, "", nil, err
	}
	if len(prev) == 0 || prev[0].RunID == req.Run.RunID {
		// No run ever held the device here (or its history aged out), or
		// this run did (resumed).
		return devKey, "", nil, nil
	}
	pr, err := h.Runs.GetRun(ctx, agent.Admin(), prev[0].RunID)
	switch {
	case errors.Is(err, agent.ErrNotFound):
		return devKey, agent.ResetPreviousUnknown, nil, nil
	case err != nil:
		return devKey, "", nil, err
	case pr.TenantID == req.Run.TenantID:
		return devKey, "", nil, nil
	}
	return devKey, agent.ResetTenantChange, packagesOf(pr), nil
}

// packagesOf lists the app packages a run's request names (ProvisionApp,
// LaunchOrAttach, WaitIdle), once each.
func packagesOf(run agent.Run) []string {
	var out []string
	for _, n := range []string{"provisionApp", "launchOrAttach", "waitIdle"} {
		if p := requestPackage(run, n); p != "" && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// epochTime reads `date +%s.%N` (epoch seconds, a dot, nanoseconds).
func epochTime(s string) (time.Time, bool) {
	sec, frac, _ := strings.Cut(strings.TrimSpace(s), ".")
	n, err := strconv.ParseInt(sec, 10, 64)
	if err != nil || n <= 0 || n > 1e11 {
		return time.Time{}, false
	}
	var ns int64
	if len(frac) > 0 {
		frac = (frac + "000000000")[:9]
		if ns, err = strconv.ParseInt(frac, 10, 64); err != nil || ns < 0 {
			ns = 0
		}
	}
	return time.Unix(n, ns).UTC(), true
}
