package android

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/avast/apkverifier"
	"github.com/shogo82148/androidbinary/apk"

	sgapk "github.com/screengraph/screengraph-agent/device/artifacts/apk"
)

// Instrumentation is an <instrumentation> entry of an installed package, as
// `pm list instrumentation` and `am instrument` see it.
type Instrumentation struct {
	// Component is "package/runnerClass" (fully qualified class).
	Component string
	// TargetPackage is android:targetPackage.
	TargetPackage string
}

// installedPackage is one package as the package manager records it.
type installedPackage struct {
	Package                 // id, versionCode, versionName, system, signer SHA-256s, testOnly
	UID              int    // Linux uid (10000+n for apps)
	CodePath         string // directory holding base.apk
	HasAPK           bool   // base.apk exists in the fs (installed from an APK)
	FirstInstallTime time.Time
	LastUpdateTime   time.Time
	MinSDK           int
	TargetSDK        int
	SigningVersion   int      // APK signature scheme that verified (1, 2, 3)
	SignatureHashes  []string // Java Signature.hashCode() of each signer cert, hex
	Activities       []string // fully qualified activity class names, manifest order
	Launcher         string   // MAIN/LAUNCHER activity, "" if none
	// Label is the application's android:label (resolved); ActivityLabels the
	// activities' own android:label by class name, when set.
	Label          string
	ActivityLabels map[string]string
	// UserInstalled: installed by the user (adb install, pm install), or
	// restored from the AVD's user data, rather than part of the image.
	UserInstalled    bool
	Instrumentations []Instrumentation
	Permissions      []string        // uses-permission names
	Granted          map[string]bool // runtime permissions granted (-g, pm grant)
	CEDataInode      int
	Stopped          bool
}

type packageManager struct {
	pkgs     map[string]*installedPackage
	nextApp  int // next app uid offset: uid = 10000 + nextApp
	nextInod int
	installs int // counter for codePath randomness and session ids
	sessions map[int]*installSession
}

type installSession struct {
	flags installFlags
	data  bytes.Buffer
}

// systemPackages are the framework packages of a Google emulator image that
// tools look for (launcher, settings, shell, webview, gms); uid per AOSP AIDs
// where they run as system/shell/phone.
var systemPackages = []struct {
	id, path string
	uid      int
}{
	{"android", "/system/framework/framework-res.apk", 1000},
	{"com.android.settings", "/system/priv-app/Settings/Settings.apk", 1000},
	{"com.android.shell", "/system/priv-app/Shell/Shell.apk", 2000},
	{"com.android.phone", "/system/priv-app/TeleService/TeleService.apk", 1001},
	{"com.android.systemui", "/system_ext/priv-app/SystemUIGoogle/SystemUIGoogle.apk", 0},
	{"com.android.providers.settings", "/system/priv-app/SettingsProvider/SettingsProvider.apk", 1000},
	{"com.google.android.apps.nexuslauncher", "/system_ext/priv-app/NexusLauncherRelease/NexusLauncherRelease.apk", 0},
	{"com.google.android.gms", "/product/priv-app/PrebuiltGmsCore/PrebuiltGmsCoreSc.apk", 0},
	{"com.google.android.webview", "/product/app/WebViewGoogle/WebViewGoogle.apk", 0},
	{"com.android.chrome", "/product/app/Chrome/Chrome.apk", 0},
	{"com.google.android.inputmethod.latin", "/product/app/LatinIMEGooglePrebuilt/LatinIMEGooglePrebuilt.apk", 0},
	{"com.android.vending", "/product/priv-app/Phonesky/Phonesky.apk", 0},
}

func newPackageManager(d *Device) (*packageManager, error) {
	pm := &packageManager{pkgs: map[string]*installedPackage{}, nextInod: 2001, sessions: map[int]*installSession{}}
	t := d.started.Add(-24 * time.Hour) // the image was built before this boot
	for _, s := range systemPackages {
		p := &installedPackage{Package: Package{ID: s.id, VersionCode: int64(d.profile.APILevel), VersionName: d.profile.Release, System: true},
			CodePath: s.path[:strings.LastIndexByte(s.path, '/')], FirstInstallTime: t, LastUpdateTime: t,
			MinSDK: d.profile.APILevel, TargetSDK: d.profile.APILevel, SigningVersion: 3}
		p.UID = s.uid
		if p.UID == 0 {
			p.UID = 10000 + pm.nextApp
			pm.nextApp++
		}
		pm.add(p)
	}
	for _, pk := range d.profile.Preinstalled {
		p := &installedPackage{Package: pk, FirstInstallTime: d.started, LastUpdateTime: d.started, MinSDK: 24, TargetSDK: d.profile.APILevel, SigningVersion: 2}
		if existing, ok := pm.pkgs[pk.ID]; ok {
			// A profile may describe a system package (e.g. give it a version).
			p.UID, p.CodePath, p.System = existing.UID, existing.CodePath, true
		} else {
			p.UID = 10000 + pm.nextApp
			pm.nextApp++
			if pk.System {
				p.CodePath = "/system/app/" + pk.ID
			} else {
				p.CodePath = pm.newCodePath(d, pk.ID)
			}
		}
		for _, s := range pk.SignerSHA256 {
			p.SignatureHashes = append(p.SignatureHashes, s[:min(8, len(s))])
		}
		if a, ok := profileApp(d.profile, pk.ID); ok {
			for _, act := range a.Activities {
				p.Activities = append(p.Activities, act.Name)
			}
			p.Launcher = a.LauncherActivity
		}
		pm.add(p)
	}
	return pm, nil
}

func (pm *packageManager) add(p *installedPackage) {
	p.CEDataInode = pm.nextInod
	pm.nextInod++
	pm.pkgs[p.ID] = p
}

// newCodePath returns a fresh install directory in the form of the API level:
// API 30+ "/data/app/~~<22 base64url>==/<pkg>-<22 base64url>==", API 29
// "/data/app/<pkg>-<22 base64url>==" (as `pm path` and dumpsys show them).
// The random parts are derived from the package, the install count and the
// start time, so a run with a fixed clock is reproducible.
func (pm *packageManager) newCodePath(d *Device, pkg string) string {
	pm.installs++
	seed := sha256.Sum256([]byte(fmt.Sprintf("%s|%d|%d", pkg, pm.installs, d.started.UnixNano())))
	a := base64.URLEncoding.EncodeToString(seed[:16])
	b := base64.URLEncoding.EncodeToString(seed[16:32])
	if d.profile.APILevel < 30 {
		return "/data/app/" + pkg + "-" + b
	}
	return "/data/app/~~" + a + "/" + pkg + "-" + b
}

func profileApp(p Profile, pkg string) (App, bool) {
	for _, a := range p.Apps {
		if a.Package == pkg {
			return a, true
		}
	}
	return App{}, false
}

// --- what the am side uses ---------------------------------------------------

// packageInfo returns a copy of an installed package's record. Takes d.mu.
func (d *Device) packageInfo(id string) (installedPackage, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	p, ok := d.pm.pkgs[id]
	if !ok {
		return installedPackage{}, false
	}
	return p.clone(), true
}

func (p *installedPackage) clone() installedPackage {
	c := *p
	c.SignerSHA256 = append([]string(nil), p.SignerSHA256...)
	c.Activities = append([]string(nil), p.Activities...)
	c.Instrumentations = append([]Instrumentation(nil), p.Instrumentations...)
	c.Granted = map[string]bool{}
	for k, v := range p.Granted {
		c.Granted[k] = v
	}
	return c
}

// packageUID returns the uid of an installed package. Takes d.mu.
func (d *Device) packageUID(id string) (int, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if p, ok := d.pm.pkgs[id]; ok {
		return p.UID, true
	}
	return 0, false
}

// appModel is the UI model of an installed package: the profile's App when the
// profile describes it, else one synthesized from the manifest (its activities,
// no view hierarchy, the MAIN/LAUNCHER activity). False when not installed.
// Takes d.mu.
func (d *Device) appModel(pkg string) (App, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	p, ok := d.pm.pkgs[pkg]
	if !ok {
		return App{}, false
	}
	if a, ok := profileApp(d.profile, pkg); ok {
		return withLabels(a, p), true
	}
	a := App{Package: pkg, LauncherActivity: p.Launcher}
	for _, name := range p.Activities {
		a.Activities = append(a.Activities, Activity{Name: name})
	}
	return withLabels(a, p), true
}

// withLabels fills each activity's empty Label the way ComponentInfo.loadLabel
// does: the activity's android:label, else the application's, else the class
// name.
func withLabels(a App, p *installedPackage) App {
	acts := make([]Activity, len(a.Activities))
	copy(acts, a.Activities)
	for i := range acts {
		if acts[i].Label != "" {
			continue
		}
		switch {
		case p.ActivityLabels[acts[i].Name] != "":
			acts[i].Label = p.ActivityLabels[acts[i].Name]
		case p.Label != "":
			acts[i].Label = p.Label
		default:
			acts[i].Label = acts[i].Name
		}
	}
	a.Activities = acts
	return a
}

// instrumentations lists every installed package's <instrumentation>, sorted by
// component. Takes d.mu.
func (d *Device) instrumentations() []Instrumentation {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []Instrumentation
	for _, p := range d.pm.pkgs {
		out = append(out, p.Instrumentations...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Component < out[j].Component })
	return out
}

// --- install -------------------------------------------------------------------

type installFlags struct {
	noReplace bool // -R
	downgrade bool // -d
	grant     bool // -g
	testOnly  bool // -t
	user      string
	size      int64 // -S
	// image: a package of the system image installed at start-up; injected
	// install faults do not apply to it.
	image bool
	// userData: installed at start-up from the AVD's saved user data (a
	// package the user had installed), so still a user-installed package.
	userData bool
}

// installResult is one line pm prints ("Success" or "Failure [CODE: msg]") and
// the exit status that goes with it.
type installResult struct {
	line string
	ok   bool
}

func failure(code, msg string) installResult {
	if msg == "" {
		return installResult{line: "Failure [" + code + "]"}
	}
	return installResult{line: "Failure [" + code + ": " + msg + "]"}
}

// parsedAPK is what install needs from an APK.
type parsedAPK struct {
	id, versionName    string
	versionCode        int64
	minSDK, targetSDK  int
	testOnly           bool
	activities         []string
	label              string
	activityLabels     map[string]string
	launcher           string
	instr              []Instrumentation
	perms              []string
	signers, sigHashes []string
	signingVersion     int
}

func qualify(pkg, cls string) string {
	if strings.HasPrefix(cls, ".") {
		return pkg + cls
	}
	if !strings.Contains(cls, ".") {
		return pkg + "." + cls
	}
	return cls
}

// parseAPK reads the manifest (androidbinary) and verifies the signature
// (apkverifier, at the device's API level so v2/v3-only APKs verify). The
// returned result is the failure pm would print.
func parseAPK(data []byte, apiLevel int, tmpPath string) (parsedAPK, *installResult) {
	var out parsedAPK
	// Entries the parser reads whole into memory are capped first (a zip
	// bomb must not reach memory); PackageParser refuses such a file too.
	if err := sgapk.CheckEntries(bytes.NewReader(data), int64(len(data))); errors.Is(err, sgapk.ErrEntryTooLarge) {
		r := failure("INSTALL_PARSE_FAILED_BAD_MANIFEST", "Failed to parse "+tmpPath)
		return out, &r
	}
	a, err := apk.OpenZipReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		if strings.Contains(err.Error(), "zip") {
			// The form of PackageParser's "not a zip" failure (captured: see SOURCES.md).
			r := failure("INSTALL_PARSE_FAILED_NOT_APK", "Failed to parse "+tmpPath+": Failed to load asset path "+tmpPath)
			return out, &r
		}
		r := failure("INSTALL_PARSE_FAILED_BAD_MANIFEST", "Failed to parse "+tmpPath)
		return out, &r
	}
	m := a.Manifest()
	out.id = m.Package.MustString()
	if out.id == "" {
		r := failure("INSTALL_PARSE_FAILED_BAD_MANIFEST", "Failed to parse "+tmpPath)
		return out, &r
	}
	out.versionCode = int64(uint32(m.VersionCode.MustInt32()))
	out.versionName, _ = m.VersionName.String()
	out.minSDK = int(m.SDK.Min.MustInt32())
	out.targetSDK = int(m.SDK.Target.MustInt32())
	if out.minSDK == 0 {
		out.minSDK = 1
	}
	if out.targetSDK == 0 {
		out.targetSDK = out.minSDK
	}
	out.testOnly = m.App.TestOnly.MustBool()
	out.label, _ = a.Label(nil)
	for _, act := range m.App.Activities {
		name := qualify(out.id, act.Name.MustString())
		out.activities = append(out.activities, name)
		if l, err := act.Label.WithResTableConfig(nil).String(); err == nil && l != "" {
			if out.activityLabels == nil {
				out.activityLabels = map[string]string{}
			}
			out.activityLabels[name] = l
		}
	}
	if l, err := a.MainActivity(); err == nil {
		out.launcher = qualify(out.id, l)
	}
	if n, _ := m.Instrument.Name.String(); n != "" {
		target, _ := m.Instrument.Target.String()
		out.instr = append(out.instr, Instrumentation{Component: out.id + "/" + qualify(out.id, n), TargetPackage: target})
	}
	for _, p := range m.UsesPermissions {
		if n, _ := p.Name.String(); n != "" {
			out.perms = append(out.perms, n)
		}
	}
	if out.minSDK > apiLevel {
		r := failure("INSTALL_FAILED_OLDER_SDK", fmt.Sprintf("Requires newer sdk version #%d (current version is #%d)", out.minSDK, apiLevel))
		return out, &r
	}
	res, err := apkverifier.VerifyWithSdkVersionReader(bytes.NewReader(data), nil, int32(apiLevel), int32(apiLevel))
	if err != nil || len(res.SignerCerts) == 0 {
		// ApkSignatureVerifier's text for an unsigned (or badly signed) APK.
		r := failure("INSTALL_PARSE_FAILED_NO_CERTIFICATES", "No signature found in package of version 2 or newer for package "+out.id)
		return out, &r
	}
	out.signingVersion = res.SigningSchemeId
	for _, chain := range res.SignerCerts {
		if len(chain) == 0 {
			continue
		}
		sum := sha256.Sum256(chain[0].Raw)
		out.signers = append(out.signers, hex.EncodeToString(sum[:]))
		out.sigHashes = append(out.sigHashes, javaSignatureHash(chain[0].Raw))
	}
	return out, nil
}

// javaSignatureHash is android.content.pm.Signature.hashCode() in hex
// (Arrays.hashCode over the certificate bytes), the value dumpsys package
// prints in "signatures:[…]".
func javaSignatureHash(der []byte) string {
	h := int32(1)
	for _, b := range der {
		h = 31*h + int32(int8(b))
	}
	return strconv.FormatUint(uint64(uint32(h)), 16)
}

func sameSigners(a, b []string) bool {
	if len(a) == 0 || len(b) == 0 {
		return true // a preinstalled package without known signers accepts any
	}
	x := append([]string(nil), a...)
	y := append([]string(nil), b...)
	sort.Strings(x)
	sort.Strings(y)
	return strings.Join(x, ",") == strings.Join(y, ",")
}

// install installs or updates a package from APK bytes, as `pm install` does,
// and calls the am side's onPackageReplaced after an update (d.mu not held).
// The checks run in PackageManagerService's order: storage, parse, test-only,
// existing install (-R), downgrade, signers.
func (d *Device) install(data []byte, f installFlags) installResult {
	res, replaced, id := d.installLocked(data, f)
	if res.ok {
		d.actions.add("install", id, d.now())
	}
	if replaced {
		d.onPackageReplaced(id)
	}
	return res
}

func (d *Device) installLocked(data []byte, f installFlags) (installResult, bool, string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if code := d.profile.Faults.InstallFailure; code != "" && !f.image {
		return failure(code, ""), false, ""
	}
	if int64(len(data)) > d.freeStorageLocked()-d.fs.used {
		return failure("INSTALL_FAILED_INSUFFICIENT_STORAGE", ""), false, ""
	}
	d.pm.installs++
	session := 1000000 + d.pm.installs*7919%900000
	tmp := fmt.Sprintf("/data/app/vmdl%d.tmp/base.apk", session)
	if d.profile.APILevel >= 30 {
		tmp = fmt.Sprintf("/data/app/vmdl%d.tmp/0.apk", session)
	}
	a, fail := parseAPK(data, d.profile.APILevel, tmp)
	if fail != nil {
		return *fail, false, ""
	}
	if a.testOnly && !f.testOnly {
		// fixtures/captures/pm-install: the "Did you forget" text from API 31.
		if d.profile.APILevel >= 31 {
			return failure("INSTALL_FAILED_TEST_ONLY", "Failed to install test-only apk. Did you forget to add -t?"), false, ""
		}
		return failure("INSTALL_FAILED_TEST_ONLY", "installPackageLI"), false, ""
	}
	old, exists := d.pm.pkgs[a.id]
	if exists {
		if f.noReplace {
			return failure("INSTALL_FAILED_ALREADY_EXISTS", "Attempt to re-install "+a.id+" without first uninstalling."), false, ""
		}
		if a.versionCode < old.VersionCode && !f.downgrade {
			return failure("INSTALL_FAILED_VERSION_DOWNGRADE", fmt.Sprintf("Downgrade detected: Update version code %d is older than current %d", a.versionCode, old.VersionCode)), false, ""
		}
		if !sameSigners(old.SignerSHA256, a.signers) {
			return failure("INSTALL_FAILED_UPDATE_INCOMPATIBLE", "Existing package "+a.id+" signatures do not match newer version; ignoring!"), false, ""
		}
	}
	now := d.now()
	p := &installedPackage{
		Package:        Package{ID: a.id, VersionCode: a.versionCode, VersionName: a.versionName, SignerSHA256: a.signers, TestOnly: a.testOnly},
		HasAPK:         true,
		MinSDK:         a.minSDK,
		TargetSDK:      a.targetSDK,
		SigningVersion: a.signingVersion, SignatureHashes: a.sigHashes,
		Activities: a.activities, Launcher: a.launcher, Instrumentations: a.instr, Permissions: a.perms,
		Label: a.label, ActivityLabels: a.activityLabels, UserInstalled: !f.image || f.userData,
		Granted:          map[string]bool{},
		FirstInstallTime: now, LastUpdateTime: now,
	}
	if exists {
		p.UID, p.FirstInstallTime, p.CEDataInode, p.Granted = old.UID, old.FirstInstallTime, old.CEDataInode, old.Granted
		if old.System {
			p.System = true
		}
		if old.HasAPK {
			d.fs.removeAll(topCodeDir(old.CodePath))
		}
	} else {
		p.UID = 10000 + d.pm.nextApp
		d.pm.nextApp++
		p.CEDataInode = d.pm.nextInod
		d.pm.nextInod++
	}
	if f.grant {
		for _, perm := range p.Permissions {
			p.Granted[perm] = true
		}
	}
	p.CodePath = d.pm.newCodePath(d, a.id)
	if err := d.fs.mkdirAll(p.CodePath, 0o755, ownerSystem, now, false); err != nil {
		return failure("INSTALL_FAILED_INTERNAL_ERROR", err.Error()), false, ""
	}
	if err := d.putSystemFileLocked(p.CodePath+"/base.apk", data, 0o644, ownerSystem); err != nil {
		return failure("INSTALL_FAILED_INSUFFICIENT_STORAGE", ""), false, ""
	}
	d.fs.mkdirAll("/data/data/"+a.id, 0o700, owner{uidName(p.UID), uidName(p.UID)}, now, false)
	d.pm.pkgs[a.id] = p
	return installResult{line: "Success", ok: true}, exists, a.id
}

// topCodeDir is the directory removed on update/uninstall (the ~~ parent on API 30+).
func topCodeDir(codePath string) string {
	rest := strings.TrimPrefix(codePath, "/data/app/")
	if strings.HasPrefix(rest, "~~") {
		return "/data/app/" + rest[:strings.IndexByte(rest, '/')]
	}
	return codePath
}

// uidName is the name Android gives an app uid: u0_a<uid-10000>.
func uidName(uid int) string {
	switch uid {
	case 1000:
		return "system"
	case 2000:
		return "shell"
	case 1001:
		return "radio"
	}
	if uid >= 10000 {
		return fmt.Sprintf("u0_a%d", uid-10000)
	}
	return strconv.Itoa(uid)
}

// uninstall removes a package (keepData keeps /data/data, as -k) and calls
// the am side's onPackageRemoved (d.mu not held).
func (d *Device) uninstall(id string, keepData bool) installResult {
	d.mu.Lock()
	p, ok := d.pm.pkgs[id]
	if !ok || p.System {
		d.mu.Unlock()
		return failure("DELETE_FAILED_INTERNAL_ERROR", "")
	}
	if p.HasAPK {
		d.fs.removeAll(topCodeDir(p.CodePath))
	}
	if !keepData {
		d.fs.removeAll("/data/data/" + id)
	}
	delete(d.pm.pkgs, id)
	d.mu.Unlock()
	d.onPackageRemoved(id)
	return installResult{line: "Success", ok: true}
}

// --- pm / cmd package ---------------------------------------------------------

// cmdPm is /system/bin/pm, which on API 28+ is a script running `cmd package "$@"`.
func cmdPm(c *Ctx) int {
	sub := *c
	sub.Args = append([]string{"cmd", "package"}, c.Args[1:]...)
	return cmdCmd(&sub)
}

// shellException prints what ShellCommand prints when a command throws.
func shellException(c *Ctx, cmd, exc string) int {
	fmt.Fprintf(c.Stderr, "Exception occurred while executing '%s':\n%s\n", cmd, exc)
	return 255
}

// cmdPackage is the package service's shell command (`cmd package …`, `pm …`).
// c.Args[0] is "package".
func cmdPackage(c *Ctx) int {
	args := c.Args[1:]
	if len(args) == 0 {
		fmt.Fprintln(c.Stdout, "Package manager (package) commands:")
		return 0
	}
	switch args[0] {
	case "install":
		return pmInstall(c, args[1:])
	case "install-create":
		return pmInstallCreate(c, args[1:])
	case "install-write":
		return pmInstallWrite(c, args[1:])
	case "install-commit":
		return pmInstallCommit(c, args[1:])
	case "install-abandon":
		return pmInstallAbandon(c, args[1:])
	case "uninstall":
		return pmUninstall(c, args[1:])
	case "path":
		return pmPath(c, args[1:])
	case "list":
		if len(args) > 1 {
			switch args[1] {
			case "packages":
				return pmListPackages(c, args[2:])
			case "instrumentation":
				return pmListInstrumentation(c, args[2:])
			}
		}
		fmt.Fprintln(c.Stderr, "Error: unknown list type '"+strings.Join(args[1:], " ")+"'")
		return 255
	case "clear":
		return pmClear(c, args[1:])
	case "grant", "revoke":
		return pmGrant(c, args[0], args[1:])
	case "resolve-activity":
		return pmResolveActivity(c, args[1:])
	case "dump":
		if len(args) < 2 {
			fmt.Fprintln(c.Stderr, "Error: no package specified")
			return 255
		}
		return dumpPackage(c, args[1])
	}
	fmt.Fprintf(c.Stderr, "Unknown command: %s\n", args[0])
	return 255
}

// parseInstallFlags reads pm install's options; the remaining words are returned.
func parseInstallFlags(args []string) (installFlags, []string, error) {
	var f installFlags
	for len(args) > 0 && strings.HasPrefix(args[0], "-") && args[0] != "-" {
		switch args[0] {
		case "-r", "-l", "-f", "-p", "--dont-kill", "--restrict-permissions", "--no-streaming", "--streaming", "--fastdeploy", "--instant", "--full", "--ephemeral", "--wait", "--no-incremental", "--staged", "--force-queryable", "--bypass-low-target-sdk-block", "--skip-verification", "-D":
		case "-R":
			f.noReplace = true
		case "-d":
			f.downgrade = true
		case "-g":
			f.grant = true
		case "-t":
			f.testOnly = true
		case "-S", "--user", "-i", "--install-reason", "--originating-uri", "--referrer", "--abi", "--pkg", "--install-location", "--force-uuid", "--apex", "--update-ownership", "--force-sdk":
			if len(args) < 2 {
				return f, nil, fmt.Errorf("missing argument for %s", args[0])
			}
			switch args[0] {
			case "-S":
				n, err := strconv.ParseInt(args[1], 10, 64)
				if err != nil || n < 0 {
					return f, nil, fmt.Errorf("java.lang.NumberFormatException: For input string: \"%s\"", args[1])
				}
				f.size = n
			case "--user":
				f.user = args[1]
			}
			args = args[1:]
		default:
			return f, nil, fmt.Errorf("java.lang.IllegalArgumentException: Unknown option %s", args[0])
		}
		args = args[1:]
	}
	return f, args, nil
}

func printInstall(c *Ctx, r installResult) int {
	fmt.Fprintln(c.Stdout, r.line)
	if r.ok {
		return 0
	}
	return 1
}

// pm install [flags] PATH  |  cmd package install [flags] -S SIZE (APK on stdin).
func pmInstall(c *Ctx, args []string) int {
	f, rest, err := parseInstallFlags(args)
	if err != nil {
		return shellException(c, "install", err.Error())
	}
	var data []byte
	switch {
	case len(rest) > 0 && rest[0] != "-":
		p := c.path(rest[0])
		b, err := c.Device.readAsSystem(p)
		if err != nil {
			// PackageManagerShellCommand.openFileForSystem's message.
			fmt.Fprintf(c.Stderr, "Error: Unable to open file: %s\nConsider using a file under /data/local/tmp/\n", rest[0])
			return 255
		}
		data = b
	case f.size > 0 || (len(rest) > 0 && rest[0] == "-"):
		var b bytes.Buffer
		n, _ := io.CopyN(&b, c.Stdin, f.size)
		if f.size > 0 && n < f.size {
			fmt.Fprintln(c.Stderr, "Error: failed to write; java.io.IOException: Stream closed")
			return 1
		}
		data = b.Bytes()
	default:
		fmt.Fprintln(c.Stderr, "Error: must either specify a package size or an APK file")
		return 255
	}
	return printInstall(c, c.Device.install(data, f))
}

func pmInstallCreate(c *Ctx, args []string) int {
	f, _, err := parseInstallFlags(args)
	if err != nil {
		return shellException(c, "install-create", err.Error())
	}
	d := c.Device
	d.mu.Lock()
	d.pm.installs++
	id := 1000000 + d.pm.installs*7919%900000
	d.pm.sessions[id] = &installSession{flags: f}
	d.mu.Unlock()
	fmt.Fprintf(c.Stdout, "Success: created install session [%d]\n", id)
	return 0
}

func sessionArg(c *Ctx, cmd string, args []string) (int, *installSession, bool) {
	if len(args) == 0 {
		shellException(c, cmd, "java.lang.IllegalArgumentException: Missing session id")
		return 0, nil, false
	}
	id, err := strconv.Atoi(args[0])
	c.Device.mu.Lock()
	s := c.Device.pm.sessions[id]
	c.Device.mu.Unlock()
	if err != nil || s == nil {
		shellException(c, cmd, "java.lang.SecurityException: Caller has no access to session "+args[0])
		return 0, nil, false
	}
	return id, s, true
}

// pm install-write [-S SIZE] SESSION NAME [PATH|-]
func pmInstallWrite(c *Ctx, args []string) int {
	var size int64 = -1
	if len(args) >= 2 && args[0] == "-S" {
		n, err := strconv.ParseInt(args[1], 10, 64)
		if err != nil {
			return shellException(c, "install-write", "java.lang.NumberFormatException: For input string: \""+args[1]+"\"")
		}
		size = n
		args = args[2:]
	}
	_, s, ok := sessionArg(c, "install-write", args)
	if !ok {
		return 255
	}
	var data []byte
	if len(args) >= 3 && args[2] != "-" {
		b, err := c.Device.readAsSystem(c.path(args[2]))
		if err != nil {
			fmt.Fprintf(c.Stderr, "Error: Unable to open file: %s\nConsider using a file under /data/local/tmp/\n", args[2])
			return 255
		}
		data = b
	} else {
		var b bytes.Buffer
		if size >= 0 {
			io.CopyN(&b, c.Stdin, size)
		} else {
			io.Copy(&b, c.Stdin)
		}
		data = b.Bytes()
	}
	c.Device.mu.Lock()
	s.data.Write(data)
	c.Device.mu.Unlock()
	fmt.Fprintf(c.Stdout, "Success: streamed %d bytes\n", len(data))
	return 0
}

func pmInstallCommit(c *Ctx, args []string) int {
	id, s, ok := sessionArg(c, "install-commit", args)
	if !ok {
		return 255
	}
	c.Device.mu.Lock()
	delete(c.Device.pm.sessions, id)
	data := append([]byte(nil), s.data.Bytes()...)
	c.Device.mu.Unlock()
	return printInstall(c, c.Device.install(data, s.flags))
}

func pmInstallAbandon(c *Ctx, args []string) int {
	id, _, ok := sessionArg(c, "install-abandon", args)
	if !ok {
		return 255
	}
	c.Device.mu.Lock()
	delete(c.Device.pm.sessions, id)
	c.Device.mu.Unlock()
	fmt.Fprintln(c.Stdout, "Success")
	return 0
}

// readAsSystem reads a file with the package manager's rights (system_server
// reads any path the shell can name).
func (d *Device) readAsSystem(p string) ([]byte, error) {
	d.settle(canon(p))
	d.mu.Lock()
	n, err := d.fs.lookup(canon(p), false)
	if err == nil && n.dir {
		err = errIsDir
	}
	if err != nil {
		d.mu.Unlock()
		return nil, err
	}
	gen, data := n.gen, append([]byte(nil), n.data...)
	d.mu.Unlock()
	if gen != nil {
		return gen(), nil
	}
	return data, nil
}

// pm uninstall [-k] [--user N] PKG
func pmUninstall(c *Ctx, args []string) int {
	keep := false
	for len(args) > 0 && strings.HasPrefix(args[0], "-") {
		switch args[0] {
		case "-k":
			keep = true
		case "--user", "--versionCode":
			if len(args) > 1 {
				args = args[1:]
			}
		}
		args = args[1:]
	}
	if len(args) == 0 {
		fmt.Fprintln(c.Stderr, "Error: package name not specified")
		return 255
	}
	return printInstall(c, c.Device.uninstall(args[0], keep))
}

// pm path [--user N] PKG: "package:<codePath>/base.apk"; exit 1 and no output
// when the package is not installed.
func pmPath(c *Ctx, args []string) int {
	args = skipUserOptions(args)
	if len(args) == 0 {
		fmt.Fprintln(c.Stderr, "Error: no package specified")
		return 255
	}
	p, ok := c.Device.packageInfo(args[0])
	if !ok {
		return 1
	}
	fmt.Fprintf(c.Stdout, "package:%s\n", apkPath(&p))
	return 0
}

func apkPath(p *installedPackage) string {
	if p.System && !p.HasAPK {
		for _, s := range systemPackages {
			if s.id == p.ID {
				return s.path
			}
		}
		return p.CodePath + "/" + p.ID + ".apk"
	}
	return p.CodePath + "/base.apk"
}

// pm list packages [-f] [-d] [-e] [-s] [-3] [-i] [-u] [-U] [--show-versioncode]
// [--user N] [--uid UID] [FILTER]: one "package:ID" line per package (-f adds
// "PATH=", --show-versioncode " versionCode:N", -U " uid:N"), sorted by id.
func pmListPackages(c *Ctx, args []string) int {
	var showPath, sys, third, showVC, showUID, showInstaller bool
	filter := ""
	for len(args) > 0 {
		a := args[0]
		args = args[1:]
		switch a {
		case "-f":
			showPath = true
		case "-s":
			sys = true
		case "-3":
			third = true
		case "--show-versioncode":
			showVC = true
		case "-U":
			showUID = true
		case "-i":
			showInstaller = true
		case "-d", "-e", "-u", "-a", "--apex-only", "-l":
		case "--user", "--uid":
			if len(args) > 0 {
				args = args[1:]
			}
		default:
			if strings.HasPrefix(a, "-") {
				fmt.Fprintf(c.Stderr, "Error: Unknown option: %s\n", a)
				return 255
			}
			filter = a
		}
	}
	d := c.Device
	d.mu.Lock()
	ids := make([]string, 0, len(d.pm.pkgs))
	for id := range d.pm.pkgs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var b strings.Builder
	for _, id := range ids {
		p := d.pm.pkgs[id]
		if (sys && !p.System) || (third && p.System) || !strings.Contains(id, filter) {
			continue
		}
		b.WriteString("package:")
		if showPath {
			b.WriteString(apkPath(p) + "=")
		}
		b.WriteString(id)
		if showVC {
			fmt.Fprintf(&b, " versionCode:%d", p.VersionCode)
		}
		if showInstaller {
			b.WriteString("  installer=null")
		}
		if showUID {
			fmt.Fprintf(&b, " uid:%d", p.UID)
		}
		b.WriteByte('\n')
	}
	d.mu.Unlock()
	io.WriteString(c.Stdout, b.String())
	return 0
}

// pm list instrumentation [-f] [TARGET]:
// "instrumentation:<pkg>/<runner> (target=<target>)".
func pmListInstrumentation(c *Ctx, args []string) int {
	target := ""
	for _, a := range args {
		if !strings.HasPrefix(a, "-") {
			target = a
		}
	}
	for _, in := range c.Device.instrumentations() {
		if target != "" && in.TargetPackage != target {
			continue
		}
		fmt.Fprintf(c.Stdout, "instrumentation:%s (target=%s)\n", flattenShort(in.Component), in.TargetPackage)
	}
	return 0
}

// flattenShort is ComponentName.flattenToShortString: "pkg/.Cls" when the
// class is inside the package.
func flattenShort(comp string) string {
	pkg, cls, ok := strings.Cut(comp, "/")
	if ok && strings.HasPrefix(cls, pkg+".") {
		return pkg + "/" + cls[len(pkg):]
	}
	return comp
}

// pm clear PKG: "Success", or "Failed" for an unknown package.
func pmClear(c *Ctx, args []string) int {
	args = skipUserOptions(args)
	if len(args) == 0 {
		fmt.Fprintln(c.Stderr, "Error: no package specified")
		return 255
	}
	d := c.Device
	d.mu.Lock()
	p, ok := d.pm.pkgs[args[0]]
	if ok {
		for k := range d.fs.nodes {
			if strings.HasPrefix(k, "/data/data/"+args[0]+"/") {
				d.fs.removeAll(k)
			}
		}
		p.Granted = map[string]bool{}
	}
	d.mu.Unlock()
	if !ok {
		fmt.Fprintln(c.Stdout, "Failed")
		return 1
	}
	fmt.Fprintln(c.Stdout, "Success")
	return 0
}

// pm grant|revoke [--user N] PKG PERMISSION: silent on success.
func pmGrant(c *Ctx, cmd string, args []string) int {
	args = skipUserOptions(args)
	if len(args) < 2 {
		return shellException(c, cmd, "java.lang.IllegalArgumentException: no permission specified")
	}
	d := c.Device
	d.mu.Lock()
	p, ok := d.pm.pkgs[args[0]]
	if ok {
		if p.Granted == nil {
			p.Granted = map[string]bool{}
		}
		if cmd == "grant" {
			p.Granted[args[1]] = true
		} else {
			delete(p.Granted, args[1])
		}
	}
	d.mu.Unlock()
	if !ok {
		return shellException(c, cmd, "java.lang.IllegalArgumentException: Unknown package: "+args[0])
	}
	return 0
}

// cmd package resolve-activity --brief PKG: the resolver's match line, then
// the launcher component; "No activity found" when there is none.
func pmResolveActivity(c *Ctx, args []string) int {
	pkg := ""
	for i := 0; i < len(args); i++ {
		switch args[i] {
		case "--brief", "--components":
		case "-a", "-c", "--user", "-n":
			i++
		default:
			pkg = args[i]
		}
	}
	p, ok := c.Device.packageInfo(pkg)
	if !ok || p.Launcher == "" {
		fmt.Fprintln(c.Stdout, "No activity found")
		return 0
	}
	fmt.Fprintln(c.Stdout, "priority=0 preferredOrder=0 match=0x108000 specificIndex=-1 isDefault=false")
	fmt.Fprintln(c.Stdout, flattenShort(p.ID+"/"+p.Launcher))
	return 0
}

// --- dumpsys package ------------------------------------------------------------

// objHash is a stable stand-in for Java's identityHashCode in hex (7 digits).
func objHash(parts ...string) string {
	sum := sha256.Sum256([]byte(strings.Join(parts, "|")))
	return strconv.FormatUint(uint64(binary.BigEndian.Uint32(sum[:4])&0x0fffffff), 16)
}

// dumpsys package PKG, in the form of fixtures/captures/dumpsys-package (the
// Activity Resolver Table, Key Set Manager and Packages sections for the one
// package; times in the device's time zone, GMT). Nothing for an unknown package.
func dumpPackage(c *Ctx, id string) int {
	p, ok := c.Device.packageInfo(id)
	if !ok {
		return 0
	}
	var b strings.Builder
	ts := func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05") }
	if p.Launcher != "" {
		b.WriteString("Activity Resolver Table:\n  Non-Data Actions:\n      android.intent.action.MAIN:\n")
		fmt.Fprintf(&b, "        %s %s filter %s\n", objHash(p.ID, p.Launcher), flattenShort(p.ID+"/"+p.Launcher), objHash(p.ID, p.Launcher, "filter"))
		b.WriteString("          Action: \"android.intent.action.MAIN\"\n          Category: \"android.intent.category.LAUNCHER\"\n\n")
	}
	fmt.Fprintf(&b, "Key Set Manager:\n  [%s]\n      Signing KeySets: %d\n\n", p.ID, p.CEDataInode%97+1)
	flags := []string{}
	if p.System {
		flags = append(flags, "SYSTEM")
	}
	flags = append(flags, "HAS_CODE", "ALLOW_CLEAR_USER_DATA")
	if p.TestOnly {
		flags = append(flags, "TEST_ONLY")
	}
	flags = append(flags, "ALLOW_BACKUP")
	pkgHash := objHash(p.ID, "pkg", strconv.FormatInt(p.LastUpdateTime.UnixNano(), 10))
	b.WriteString("Packages:\n")
	fmt.Fprintf(&b, "  Package [%s] (%s):\n", p.ID, objHash(p.ID, "setting"))
	fmt.Fprintf(&b, "    userId=%d\n", p.UID)
	fmt.Fprintf(&b, "    pkg=Package{%s %s}\n", pkgHash, p.ID)
	fmt.Fprintf(&b, "    codePath=%s\n", p.CodePath)
	fmt.Fprintf(&b, "    resourcePath=%s\n", p.CodePath)
	fmt.Fprintf(&b, "    legacyNativeLibraryDir=%s/lib\n", p.CodePath)
	b.WriteString("    primaryCpuAbi=null\n    secondaryCpuAbi=null\n")
	fmt.Fprintf(&b, "    versionCode=%d minSdk=%d targetSdk=%d\n", p.VersionCode, p.MinSDK, p.TargetSDK)
	fmt.Fprintf(&b, "    versionName=%s\n", p.VersionName)
	b.WriteString("    splits=[base]\n")
	fmt.Fprintf(&b, "    apkSigningVersion=%d\n", p.SigningVersion)
	fmt.Fprintf(&b, "    applicationInfo=ApplicationInfo{%s %s}\n", pkgHash, p.ID)
	fmt.Fprintf(&b, "    flags=[ %s ]\n", strings.Join(flags, " "))
	b.WriteString("    privateFlags=[ PRIVATE_FLAG_ACTIVITIES_RESIZE_MODE_RESIZEABLE_VIA_SDK_VERSION ALLOW_AUDIO_PLAYBACK_CAPTURE PRIVATE_FLAG_ALLOW_NATIVE_HEAP_POINTER_TAGGING ]\n")
	b.WriteString("    forceQueryable=false\n    queriesPackages=[]\n")
	fmt.Fprintf(&b, "    dataDir=/data/user/0/%s\n", p.ID)
	b.WriteString("    supportsScreens=[small, medium, large, xlarge, resizeable, anyDensity]\n")
	fmt.Fprintf(&b, "    timeStamp=%s\n", ts(p.LastUpdateTime))
	fmt.Fprintf(&b, "    firstInstallTime=%s\n", ts(p.FirstInstallTime))
	fmt.Fprintf(&b, "    lastUpdateTime=%s\n", ts(p.LastUpdateTime))
	sigs := p.SignatureHashes
	fmt.Fprintf(&b, "    signatures=PackageSignatures{%s version:%d, signatures:[%s], past signatures:[]}\n", objHash(p.ID, "sigs"), p.SigningVersion, strings.Join(sigs, ", "))
	b.WriteString("    installPermissionsFixed=true\n")
	fmt.Fprintf(&b, "    pkgFlags=[ %s ]\n", strings.Join(flags, " "))
	if len(p.Permissions) > 0 {
		b.WriteString("    requested permissions:\n")
		for _, perm := range p.Permissions {
			fmt.Fprintf(&b, "      %s\n", perm)
		}
	}
	fmt.Fprintf(&b, "    User 0: ceDataInode=%d installed=true hidden=false suspended=false distractionFlags=0 stopped=%t notLaunched=false enabled=0 instant=false virtual=false\n", p.CEDataInode, p.Stopped)
	var granted []string
	for perm, ok := range p.Granted {
		if ok {
			granted = append(granted, perm)
		}
	}
	sort.Strings(granted)
	if len(granted) > 0 {
		b.WriteString("      runtime permissions:\n")
		for _, perm := range granted {
			fmt.Fprintf(&b, "        %s: granted=true\n", perm)
		}
	}
	io.WriteString(c.Stdout, b.String())
	return 0
}

func dumpsysPackage(c *Ctx) int {
	// c.Args: ["package", PKG?]
	args := c.Args[1:]
	for len(args) > 0 && strings.HasPrefix(args[0], "-") {
		args = args[1:]
	}
	if len(args) == 0 {
		c.Device.mu.Lock()
		ids := make([]string, 0, len(c.Device.pm.pkgs))
		for id := range c.Device.pm.pkgs {
			ids = append(ids, id)
		}
		c.Device.mu.Unlock()
		sort.Strings(ids)
		for _, id := range ids {
			dumpPackage(c, id)
		}
		return 0
	}
	if args[0] == "packages" && len(args) > 1 {
		args = args[1:]
	}
	return dumpPackage(c, args[0])
}

func init() {
	registerCommand("pm", cmdPm)
	registerCmdService("package", cmdPackage)
	registerDumpsys("package", dumpsysPackage)
}

// skipUserOptions drops the leading options of a pm command that takes only
// flags and `--user N` before its operands (pm path, pm clear, pm grant).
func skipUserOptions(args []string) []string {
	for len(args) > 0 && strings.HasPrefix(args[0], "-") {
		if args[0] == "--user" && len(args) > 1 {
			args = args[1:]
		}
		args = args[1:]
	}
	return args
}

// UserAPKs returns the APK of every package the user installed (or that was
// restored as user data, see Package.UserData), by package id: what a real
// emulator keeps in its userdata partition across restarts.
func (d *Device) UserAPKs() map[string][]byte {
	d.mu.Lock()
	paths := map[string]string{}
	for id, p := range d.pm.pkgs {
		if p.HasAPK && p.UserInstalled {
			paths[id] = p.CodePath + "/base.apk"
		}
	}
	d.mu.Unlock()
	out := map[string][]byte{}
	for id, path := range paths {
		if b, err := d.readAsSystem(path); err == nil {
			out[id] = b
		}
	}
	return out
}
