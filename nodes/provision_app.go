package nodes

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/screengraph/screengraph-agent/adb/parse"
	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/device"
	"github.com/screengraph/screengraph-agent/device/android"
	"github.com/screengraph/screengraph-agent/device/artifacts/apk"
)

// InstallationPolicy is ProvisionApp's installationPolicy.
type InstallationPolicy string

// Installation policies; what each does per installed state is the table in
// ProvisionApp's doc.
const (
	InstallIfMissing     InstallationPolicy = "INSTALL_IF_MISSING"
	ReinstallIfDifferent InstallationPolicy = "REINSTALL_IF_DIFFERENT"
	AlwaysReinstall      InstallationPolicy = "ALWAYS_REINSTALL"
	NeverInstall         InstallationPolicy = "NEVER_INSTALL"
)

// appPresenceStatus values.
const (
	AppPresent = "PRESENT"
	AppAbsent  = "ABSENT"
)

// signatureValidationStatus values.
const (
	// SignatureMatched: the installed app's signer is expectedBuildSignatureSha256.
	SignatureMatched = "MATCHED"
	// SignatureMismatched: it is another key.
	SignatureMismatched = "MISMATCHED"
	// SignatureUnverified: not verified: no expected digest was given, nothing
	// is installed, or the installed signer could not be read (base.apk not
	// pullable or not parsable).
	SignatureUnverified = "UNVERIFIED"
)

// InstallState compares the installed app with the artifact by versionCode
// (Appium's install state machine, android-recipes.md).
type InstallState string

const (
	StateNotInstalled InstallState = "NOT_INSTALLED"
	StateOlder        InstallState = "OLDER" // installed versionCode < artifact's
	StateSame         InstallState = "SAME"
	StateNewer        InstallState = "NEWER" // installed versionCode > artifact's: only a downgrade reaches the artifact
)

// NotInstalledCode is the agent.Error Code of a NEVER_INSTALL run on a device
// without the app.
const NotInstalledCode = "APP_NOT_INSTALLED"

// ProvisionAppInput is ProvisionApp's Input (screengraph-nodes.md §2).
type ProvisionAppInput struct {
	RunID                          string                         `json:"runId"`
	TenantID                       string                         `json:"tenantId,omitempty"`
	ProjectID                      string                         `json:"projectId,omitempty"`
	IterationOrdinalNumber         int                            `json:"iterationOrdinalNumber,omitempty"`
	DeviceRuntimeContext           *DeviceRuntimeContext          `json:"deviceRuntimeContext,omitempty"`
	ApplicationUnderTestDescriptor ApplicationUnderTestDescriptor `json:"applicationUnderTestDescriptor"`
	// InstallationPolicy; "" means INSTALL_IF_MISSING.
	InstallationPolicy InstallationPolicy `json:"installationPolicy,omitempty"`
}

// ApplicationProvisioningOutcome is the app as it is on the device when the
// node ends (also after a failure, so a half-done provisioning is visible).
type ApplicationProvisioningOutcome struct {
	AppPresenceStatus string `json:"appPresenceStatus"`
	// InstalledVersionName/Code are null when the app is absent.
	InstalledVersionName      *string `json:"installedVersionName"`
	InstalledVersionCode      *int64  `json:"installedVersionCode"`
	SignatureValidationStatus string  `json:"signatureValidationStatus"`
}

// ProvisionAppOutput is ProvisionApp's Output. The outcome is null only when
// the device could not be read at all (or the input was invalid).
type ProvisionAppOutput struct {
	RunID                          string                          `json:"runId"`
	ApplicationProvisioningOutcome *ApplicationProvisioningOutcome `json:"applicationProvisioningOutcome"`
	Common
}

// ArtifactFetcher gets APKs to local disk and reads them;
// device/artifacts.Fetcher implements it.
type ArtifactFetcher interface {
	// Fetch makes ref (file://, https://, s3://) a local file; progress gets
	// bytes done and total (-1 unknown). Errors: artifact_unavailable
	// (retryable or not), invalid_request_error for a bad ref.
	Fetch(ctx context.Context, ref string, progress func(done, total int64)) (apk.Artifact, error)
	// Inspect reads package id, versions and the signer digests that apply at
	// apiLevel. Errors: artifact_unavailable APK_INVALID / APK_SIGNATURE_INVALID.
	Inspect(path string, apiLevel int) (apk.Info, error)
}

// VerificationKey names one installed build on one device. Installing or
// updating a package changes its lastUpdateTime and its codePath (a fresh
// random directory under /data/app), so an unchanged key means the same bytes
// are still installed.
type VerificationKey struct {
	Serial      string `json:"serial"`
	Package     string `json:"packageId"`
	VersionCode int64  `json:"versionCode"`
	// LastUpdateTime as dumpsys prints it ("2024-05-01 10:11:12").
	LastUpdateTime string `json:"lastUpdateTime"`
	CodePath       string `json:"codePath"`
}

// VerificationCache remembers the signer digests of installed builds, so an
// unchanged device is not pulled from again. The daemon backs it with its store.
type VerificationCache interface {
	// Get returns the signer SHA-256 digests recorded for key; ok false when none.
	Get(ctx context.Context, key VerificationKey) (signers []string, ok bool, err error)
	Put(ctx context.Context, key VerificationKey, signers []string) error
}

// MemoryVerifications is an in-process VerificationCache (tests, one-shot runs).
type MemoryVerifications struct {
	mu sync.Mutex
	m  map[VerificationKey][]string
}

func (c *MemoryVerifications) Get(_ context.Context, k VerificationKey) ([]string, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.m[k]
	return slices.Clone(s), ok, nil
}

func (c *MemoryVerifications) Put(_ context.Context, k VerificationKey, signers []string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[VerificationKey][]string{}
	}
	c.m[k] = slices.Clone(signers)
	return nil
}

var _ VerificationCache = (*MemoryVerifications)(nil)

// ProvisionDeps are ProvisionApp's ports besides Ports.
type ProvisionDeps struct {
	Artifacts ArtifactFetcher
	// Verifications may be nil: the installed app is then pulled every time
	// its signer is needed.
	Verifications VerificationCache
	// TempDir receives the installed base.apk while it is inspected; "" = os.TempDir().
	TempDir string
}

// InstalledApp is what the device says about the package (android.InstalledApp).
type InstalledApp = android.InstalledApp

// ProvisionApp makes sure the package is installed with the build of
// apkStorageObjectReference, per installationPolicy.
//
// Steps:
//  1. Device API level (getprop ro.build.version.sdk) and the installed state
//     (ReadInstalledApp).
//  2. Unless NEVER_INSTALL: fetch the artifact, Inspect it at the device's API
//     level, check its package id (else invalid_request_error) and its signer
//     against expectedBuildSignatureSha256 BEFORE anything is installed: a
//     different signer is signature_mismatch, not retryable, device untouched.
//  3. Compare versionCodes (InstallState) and, when it matters, the
//     installed app's signer: `pm path` -> pull base.apk -> Inspect, skipped
//     when the VerificationCache knows the same build (VerificationKey).
//  4. Act per the table below.
//  5. Install errors: INSTALL_FAILED_ALREADY_EXISTS counts as success;
//     INSTALL_FAILED_VERSION_DOWNGRADE is version_downgrade; other codes are
//     install_failed with the code (INSUFFICIENT_STORAGE says to free space);
//     device_offline during the install is waited out once (OfflineGrace) and
//     the install retried once unless the new build already landed.
//  6. Re-read the installed state: the versionCode must be the artifact's.
//     The new build's signer is the artifact's (recorded in the cache).
//
// Installed state (versionCode, installed vs artifact) by policy:
//
//	policy                 NOT_INSTALLED  OLDER                SAME                     NEWER
//	INSTALL_IF_MISSING     install        update (-r)          nothing                  version_downgrade
//	REINSTALL_IF_DIFFERENT install        update (-r)          update when versionName  version_downgrade
//	                                                           differs, else nothing
//	ALWAYS_REINSTALL       install        uninstall + install  uninstall + install      uninstall + install
//	NEVER_INSTALL          invalid_request_error APP_NOT_INSTALLED; present: report only
//
// A signer change (installed signer != artifact signer): REINSTALL_IF_DIFFERENT
// uninstalls first (pm would refuse with INSTALL_FAILED_UPDATE_INCOMPATIBLE);
// INSTALL_IF_MISSING never uninstalls (data loss) and fails with
// signature_mismatch. An unreadable installed signer: REINSTALL_IF_DIFFERENT
// updates (falling back to uninstall + install on UPDATE_INCOMPATIBLE), the
// others report UNKNOWN.
//
// The outcome reports the state at the end, also on failure.
func ProvisionApp(ctx context.Context, in ProvisionAppInput, p Ports, deps ProvisionDeps) (ProvisionAppOutput, error) {
	out := ProvisionAppOutput{RunID: in.RunID, Common: Common{NodeName: NodeProvisionApp}}
	r := &provisioner{in: in, p: p, deps: deps}
	err := r.run(ctx)
	out.ApplicationProvisioningOutcome = r.outcome()
	if e := MarkFailure(&out.Common, err); e != nil {
		p.Logf("ProvisionApp failed: %s", e.Error())
		return out, e
	}
	return out, nil
}

type provisioner struct {
	in   ProvisionAppInput
	p    Ports
	deps ProvisionDeps

	pkg      string
	policy   InstallationPolicy
	expected string // normalized digest, "" when not given
	apiLevel int
	serial   string

	app     InstalledApp // latest read
	read    bool         // app holds a successful read
	signers []string     // of the installed build in app; nil = unknown
	art     apk.Artifact
	info    apk.Info
}

func (r *provisioner) run(ctx context.Context) error {
	if err := r.check(); err != nil {
		return err
	}
	// 1. Device.
	lvl, app, err := android.ReadDeviceApp(ctx, r.p.Device, r.pkg)
	if err != nil {
		return err
	}
	r.apiLevel, r.app, r.read = lvl, app, true
	if r.app.Present {
		r.p.Logf("%s on %s: versionCode %d (%s), lastUpdateTime %s", r.pkg, r.serial, r.app.VersionCode, r.app.VersionName, dumpsysTime(r.app.LastUpdateTime))
	} else {
		r.p.Logf("%s is not installed on %s", r.pkg, r.serial)
	}
	if r.policy == NeverInstall {
		return r.neverInstall(ctx)
	}
	// 2. Artifact, verified before anything touches the device.
	if err := r.fetch(ctx); err != nil {
		return err
	}
	return r.decide(ctx)
}

// check reads and checks the input and the ports.
func (r *provisioner) check() error {
	d := r.in.ApplicationUnderTestDescriptor
	r.pkg = strings.TrimSpace(d.AndroidPackageID)
	if r.pkg == "" {
		return agent.Errorf(agent.ErrInvalidRequest, "applicationUnderTestDescriptor.androidPackageId is empty")
	}
	r.policy = cmp.Or(r.in.InstallationPolicy, InstallIfMissing)
	switch r.policy {
	case InstallIfMissing, ReinstallIfDifferent, AlwaysReinstall, NeverInstall:
	default:
		return agent.Errorf(agent.ErrInvalidRequest, "installationPolicy %q: expected INSTALL_IF_MISSING, REINSTALL_IF_DIFFERENT, ALWAYS_REINSTALL or NEVER_INSTALL", r.policy)
	}
	if s := strings.TrimSpace(d.ExpectedBuildSignatureSHA256); s != "" {
		n, ok := apk.NormalizeDigest(s)
		if !ok {
			return agent.Errorf(agent.ErrInvalidRequest, "expectedBuildSignatureSha256 %q is not a SHA-256 hex digest", s)
		}
		r.expected = n
	}
	if r.policy != NeverInstall && strings.TrimSpace(d.APKStorageObjectReference) == "" {
		return agent.Errorf(agent.ErrInvalidRequest, "applicationUnderTestDescriptor.apkStorageObjectReference is required with installationPolicy %s", r.policy)
	}
	if r.p.Device == nil {
		return agent.Errorf(agent.ErrInternal, "ProvisionApp: no device port")
	}
	if r.policy != NeverInstall && r.deps.Artifacts == nil {
		return agent.Errorf(agent.ErrInternal, "ProvisionApp: no artifact fetcher")
	}
	r.serial = r.p.Device.Serial()
	return nil
}

// neverInstall: the app must be there; its signer is checked when an
// expected digest is given.
func (r *provisioner) neverInstall(ctx context.Context) error {
	if !r.app.Present {
		e := agent.Errorf(agent.ErrInvalidRequest, "%s is not installed on %s and installationPolicy NEVER_INSTALL forbids installing it", r.pkg, r.serial)
		e.Code = NotInstalledCode
		return e
	}
	if r.expected == "" {
		return nil
	}
	r.installedSigners(ctx)
	return r.checkInstalledSigner()
}

// decide acts per the table of ProvisionApp's doc (steps 3 and 4).
func (r *provisioner) decide(ctx context.Context) error {
	state := CompareInstalled(r.app, r.info.VersionCode)
	r.p.Logf("install state %s (installed %s, artifact versionCode %d %q), policy %s", state, versionText(r.app), r.info.VersionCode, r.info.VersionName, r.policy)
	switch {
	case state == StateNotInstalled:
		return r.install(ctx, false)
	case r.policy == AlwaysReinstall:
		return r.reinstall(ctx)
	}
	r.installedSigners(ctx)
	if state == StateNewer {
		return agent.Errorf(agent.ErrVersionDowngrade, "%s versionCode %d is installed on %s; the artifact's versionCode %d would be a downgrade, which installationPolicy %s refuses (use ALWAYS_REINSTALL to replace it)",
			r.pkg, r.app.VersionCode, r.serial, r.info.VersionCode, r.policy)
	}
	signerDiffers := r.signers != nil && !apk.SameSigners(r.signers, r.info.SignerSHA256)
	switch {
	case r.policy == InstallIfMissing && signerDiffers:
		return r.installedSignerError()
	case r.policy == InstallIfMissing && state == StateOlder:
		return r.install(ctx, true)
	case r.policy == ReinstallIfDifferent && signerDiffers:
		r.p.Logf("installed %s is signed by %s, the artifact by %s: uninstall + install", r.pkg, short(r.signers), short(r.info.SignerSHA256))
		return r.reinstall(ctx)
	case r.policy == ReinstallIfDifferent && (state == StateOlder || r.signers == nil || r.app.VersionName != r.info.VersionName):
		return r.install(ctx, true)
	}
	r.p.Logf("%s on %s is already the artifact's build; nothing installed", r.pkg, r.serial)
	return r.checkInstalledSigner()
}

// fetch downloads and inspects the artifact and checks it against the input.
func (r *provisioner) fetch(ctx context.Context) error {
	ref := strings.TrimSpace(r.in.ApplicationUnderTestDescriptor.APKStorageObjectReference)
	a, err := r.deps.Artifacts.Fetch(ctx, ref, r.progress("download "+ref))
	if err != nil {
		return err
	}
	r.art = a
	if a.CacheHit {
		r.p.Logf("artifact %s from the cache (sha256 %s, %d bytes)", ref, a.SHA256, a.Size)
	} else {
		r.p.Logf("artifact %s downloaded (sha256 %s, %d bytes)", ref, a.SHA256, a.Size)
	}
	info, err := r.deps.Artifacts.Inspect(a.Path, r.apiLevel)
	if err != nil {
		return err
	}
	r.info = info
	if info.Package != r.pkg {
		return agent.Errorf(agent.ErrInvalidRequest, "artifact %s is package %s, not %s", ref, info.Package, r.pkg)
	}
	if r.expected != "" && !slices.Contains(info.SignerSHA256, r.expected) {
		return agent.Errorf(agent.ErrSignatureMismatch, "artifact %s is signed by %s, not the expected %s; nothing installed", ref, strings.Join(info.SignerSHA256, ","), r.expected)
	}
	return nil
}

// install runs pm install (replace: -r) and re-reads the state.
func (r *provisioner) install(ctx context.Context, replace bool) error {
	err := r.pmInstall(ctx, replace)
	if e := agent.Classify(err); e != nil && e.ID == agent.ErrInstallFailed && isSignerConflict(e.Code) && r.policy == ReinstallIfDifferent {
		r.p.Logf("%s: %s; uninstall + install", r.pkg, e.Code)
		return r.reinstall(ctx)
	}
	if err != nil {
		r.rereadQuietly(ctx)
		return err
	}
	return r.afterInstall(ctx)
}

// reinstall uninstalls then installs; a failure between the two leaves the
// app absent, which the outcome reports.
func (r *provisioner) reinstall(ctx context.Context) error {
	r.p.Logf("uninstalling %s from %s", r.pkg, r.serial)
	if err := r.p.Device.Uninstall(ctx, r.pkg); err != nil {
		r.rereadQuietly(ctx)
		if r.read && !r.app.Present {
			r.p.Logf("uninstall reported %v but %s is gone; installing", err, r.pkg)
		} else {
			return err
		}
	}
	r.signers = nil
	if err := r.pmInstall(ctx, false); err != nil {
		r.rereadQuietly(ctx)
		return err
	}
	return r.afterInstall(ctx)
}

// pmInstall installs the artifact once, with the recovery rules of step 5.
func (r *provisioner) pmInstall(ctx context.Context, replace bool) error {
	opt := device.InstallOptions{Replace: replace, AllowTestOnly: r.info.TestOnly, Progress: r.progress("push " + r.pkg)}
	before := r.app
	r.p.Logf("installing %s versionCode %d on %s (%s)", r.pkg, r.info.VersionCode, r.serial, flagsText(opt))
	err := r.p.Device.Install(ctx, r.art.Path, opt)
	e := agent.Classify(err)
	if e != nil && (e.ID == agent.ErrDeviceOffline || e.ID == agent.ErrNetwork) && ctx.Err() == nil {
		// A brief "device offline" right after an install happens
		// (android-recipes.md): wait for the device, then look before retrying.
		r.p.Logf("install: %v; waiting up to %s for %s", e, OfflineGrace, r.serial)
		if werr := r.waitOnline(ctx); werr != nil {
			return err
		}
		if rerr := r.reread(ctx); rerr == nil && r.landed(before) {
			r.p.Logf("the install landed before the connection dropped")
			return nil
		}
		err = r.p.Device.Install(ctx, r.art.Path, opt)
		e = agent.Classify(err)
	}
	if e == nil {
		return nil
	}
	if e.ID != agent.ErrInstallFailed {
		return err
	}
	switch e.Code {
	case "INSTALL_FAILED_ALREADY_EXISTS":
		r.p.Logf("install: INSTALL_FAILED_ALREADY_EXISTS, counted as installed")
		return nil
	case "INSTALL_FAILED_VERSION_DOWNGRADE":
		d := agent.Wrap(agent.ErrVersionDowngrade, err, "the package manager refused versionCode %d of %s as a downgrade", r.info.VersionCode, r.pkg)
		d.Code = e.Code
		return d
	case "INSTALL_FAILED_INSUFFICIENT_STORAGE":
		s := agent.Wrap(agent.ErrInstallFailed, err, "not enough free storage on %s for %s (%d bytes); free space and retry", r.serial, r.pkg, r.art.Size)
		s.Code, s.Retryable = e.Code, false
		return s
	}
	return err
}

// landed reports whether the artifact's build replaced before in the state just read.
func (r *provisioner) landed(before InstalledApp) bool {
	return r.app.Present && r.app.VersionCode == r.info.VersionCode &&
		(!before.Present || r.app.CodePath != before.CodePath || !r.app.LastUpdateTime.Equal(before.LastUpdateTime))
}

func (r *provisioner) waitOnline(ctx context.Context) error {
	deadline := r.p.Now().Add(OfflineGrace)
	for {
		st, err := r.p.Device.State(ctx)
		if err == nil && st == "device" {
			return nil
		}
		if !r.p.Now().Before(deadline) {
			if err == nil {
				err = agent.Errorf(agent.ErrDeviceOffline, "%s is %s", r.serial, st)
			}
			return err
		}
		if err := r.p.Wait(ctx, 250*time.Millisecond); err != nil {
			return err
		}
	}
}

// afterInstall re-reads the state, checks the versionCode and records the
// new build's signer (the artifact's: the package manager verified it).
func (r *provisioner) afterInstall(ctx context.Context) error {
	if err := r.reread(ctx); err != nil {
		return err
	}
	if !r.app.Present || r.app.VersionCode != r.info.VersionCode {
		return agent.Errorf(agent.ErrInstallFailed, "the install reported success but %s on %s is %s, not versionCode %d", r.pkg, r.serial, versionText(r.app), r.info.VersionCode)
	}
	r.signers = slices.Clone(r.info.SignerSHA256)
	if r.deps.Verifications != nil {
		if err := r.deps.Verifications.Put(ctx, r.key(), r.signers); err != nil {
			r.p.Logf("verification cache: %v", err)
		}
	}
	r.p.Logf("installed %s %s on %s", r.pkg, versionText(r.app), r.serial)
	return r.checkInstalledSigner()
}

// installedSigners fills r.signers for the installed build: from the cache,
// else by pulling base.apk. Failure leaves it nil (UNKNOWN).
func (r *provisioner) installedSigners(ctx context.Context) {
	if !r.app.Present || r.signers != nil {
		return
	}
	key := r.key()
	if r.deps.Verifications != nil {
		s, ok, err := r.deps.Verifications.Get(ctx, key)
		if err != nil {
			r.p.Logf("verification cache: %v", err)
		}
		if ok && len(s) > 0 {
			r.p.Logf("installed signer of %s from the verification cache (unchanged since lastUpdateTime %s)", r.pkg, key.LastUpdateTime)
			r.signers = s
			return
		}
	}
	s, err := r.pullSigners(ctx)
	if err != nil {
		r.p.Logf("installed signer of %s unknown: %v", r.pkg, err)
		return
	}
	r.signers = s
	if r.deps.Verifications != nil {
		if err := r.deps.Verifications.Put(ctx, key, s); err != nil {
			r.p.Logf("verification cache: %v", err)
		}
	}
}

// pullSigners: `pm path` -> pull base.apk -> Inspect.
func (r *provisioner) pullSigners(ctx context.Context) ([]string, error) {
	if r.deps.Artifacts == nil {
		return nil, agent.Errorf(agent.ErrInternal, "no artifact inspector")
	}
	out, err := android.ShellOut(ctx, r.p.Device, "pm path "+r.pkg)
	if err != nil {
		return nil, err
	}
	paths := parse.ParsePmPath(out)
	if len(paths) == 0 {
		return nil, agent.Errorf(agent.ErrProcess, "`pm path %s` listed no APK", r.pkg)
	}
	base := paths[0] // base.apk comes first, then the splits
	for _, p := range paths {
		if strings.HasSuffix(p, "/base.apk") {
			base = p
			break
		}
	}
	f, err := os.CreateTemp(r.deps.TempDir, "installed-*.apk")
	if err != nil {
		return nil, agent.Wrap(agent.ErrInternal, err, "temp file for %s", base)
	}
	defer os.Remove(f.Name())
	n, err := r.p.Device.Pull(ctx, base, f)
	cerr := f.Close()
	if err != nil {
		return nil, err
	}
	if cerr != nil {
		return nil, agent.Wrap(agent.ErrInternal, cerr, "write %s", f.Name())
	}
	r.p.Logf("pulled %s (%d bytes) to read its signer", base, n)
	info, err := r.deps.Artifacts.Inspect(f.Name(), r.apiLevel)
	if err != nil {
		return nil, err
	}
	if info.Package != r.pkg {
		return nil, agent.Errorf(agent.ErrProcess, "%s is package %s", base, info.Package)
	}
	return info.SignerSHA256, nil
}

// checkInstalledSigner fails with signature_mismatch when an expected digest
// was given and the installed build is known to be signed otherwise.
func (r *provisioner) checkInstalledSigner() error {
	if r.expected == "" || r.signers == nil || slices.Contains(r.signers, r.expected) {
		return nil
	}
	return r.installedSignerError()
}

func (r *provisioner) installedSignerError() error {
	want := r.expected
	if want == "" {
		want = strings.Join(r.info.SignerSHA256, ",") + " (the artifact's)"
	}
	return agent.Errorf(agent.ErrSignatureMismatch, "installed %s on %s is signed by %s, not %s; installationPolicy %s does not replace it",
		r.pkg, r.serial, strings.Join(r.signers, ","), want, r.policy)
}

func (r *provisioner) key() VerificationKey {
	return VerificationKey{Serial: r.serial, Package: r.pkg, VersionCode: r.app.VersionCode,
		LastUpdateTime: dumpsysTime(r.app.LastUpdateTime), CodePath: r.app.CodePath}
}

func (r *provisioner) reread(ctx context.Context) error {
	a, err := android.ReadInstalledApp(ctx, r.p.Device, r.pkg, r.apiLevel)
	if err != nil {
		return err
	}
	if a != r.app {
		r.signers = nil
	}
	r.app, r.read = a, true
	return nil
}

// rereadQuietly refreshes the state after a failure, for the outcome.
func (r *provisioner) rereadQuietly(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	if err := r.reread(ctx); err != nil {
		r.read = false
	}
}

// outcome is the state last read; nil when the device was never read.
func (r *provisioner) outcome() *ApplicationProvisioningOutcome {
	if !r.read {
		return nil
	}
	o := &ApplicationProvisioningOutcome{AppPresenceStatus: AppAbsent, SignatureValidationStatus: SignatureUnverified}
	if !r.app.Present {
		return o
	}
	o.AppPresenceStatus = AppPresent
	vn, vc := r.app.VersionName, r.app.VersionCode
	o.InstalledVersionName, o.InstalledVersionCode = &vn, &vc
	switch {
	case r.expected == "":
	case r.signers == nil:
		o.SignatureValidationStatus = SignatureUnverified
	case slices.Contains(r.signers, r.expected):
		o.SignatureValidationStatus = SignatureMatched
	default:
		o.SignatureValidationStatus = SignatureMismatched
	}
	return o
}

// progress returns a byte-progress callback that logs every 10%.
func (r *provisioner) progress(what string) func(done, total int64) {
	last := -1
	return func(done, total int64) {
		if total <= 0 {
			return
		}
		pct := int(done * 100 / total)
		if pct/10 == last/10 && pct != 100 {
			return
		}
		if pct == last {
			return
		}
		last = pct
		r.p.Logf("%s: %d%% (%d of %d bytes)", what, pct, done, total)
	}
}

// CompareInstalled classifies the installed app against an artifact versionCode.
func CompareInstalled(a InstalledApp, artifactVersionCode int64) InstallState {
	switch {
	case !a.Present:
		return StateNotInstalled
	case a.VersionCode < artifactVersionCode:
		return StateOlder
	case a.VersionCode > artifactVersionCode:
		return StateNewer
	}
	return StateSame
}

func isSignerConflict(code string) bool {
	return code == "INSTALL_FAILED_UPDATE_INCOMPATIBLE" || code == "INSTALL_FAILED_INCONSISTENT_CERTIFICATES" ||
		code == "INSTALL_FAILED_SHARED_USER_INCOMPATIBLE"
}

func dumpsysTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.Format("2006-01-02 15:04:05")
}

func versionText(a InstalledApp) string {
	if !a.Present {
		return "not installed"
	}
	return fmt.Sprintf("versionCode %d %q", a.VersionCode, a.VersionName)
}

func flagsText(o device.InstallOptions) string {
	var f []string
	if o.Replace {
		f = append(f, "-r")
	}
	if o.AllowTestOnly {
		f = append(f, "-t")
	}
	if len(f) == 0 {
		return "no flags"
	}
	return strings.Join(f, " ")
}

func short(ds []string) string {
	var s []string
	for _, d := range ds {
		if len(d) > 12 {
			d = d[:12] + "…"
		}
		s = append(s, d)
	}
	return strings.Join(s, ",")
}

// provisionAppNode is ProvisionApp as a setup node: the policy's
// installation mode unless the input names one.
type provisionAppNode struct{ deps ProvisionDeps }

func (provisionAppNode) Name() string { return NodeProvisionApp }

func (provisionAppNode) Prepare(in *ProvisionAppInput, s StepContext) {
	in.IterationOrdinalNumber = s.Step.IterationOrdinalNumber
	in.DeviceRuntimeContext = mergeContext(in.DeviceRuntimeContext, s.Context)
	if in.InstallationPolicy == "" {
		in.InstallationPolicy = InstallationPolicy(s.Policy.InstallationPolicy)
	}
}

func (n provisionAppNode) Run(ctx context.Context, in ProvisionAppInput, _ StepContext, p Ports) (ProvisionAppOutput, error) {
	return ProvisionApp(ctx, in, p, n.deps)
}
