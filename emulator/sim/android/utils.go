package android

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// --- services ----------------------------------------------------------------

// binderServices are the service names and interface descriptors `service list`
// prints: the whole list of a real API 33 sdk_gphone64_x86_64 emulator
// (fixtures/captures/service-list/api33-emulator.txt, in its order). native
// ones (HALs, SurfaceFlinger, installd, media.*) exist from early boot; the
// framework ones are published by system_server half-way through the boot.
var binderServices = []struct {
	name, iface string
	native      bool
}{
	{"DockObserver", "", false},
	{"SurfaceFlinger", "android.ui.ISurfaceComposer", true},
	{"SurfaceFlingerAIDL", "android.gui.ISurfaceComposer", true},
	{"accessibility", "android.view.accessibility.IAccessibilityManager", false},
	{"account", "android.accounts.IAccountManager", false},
	{"activity", "android.app.IActivityManager", false},
	{"activity_task", "android.app.IActivityTaskManager", false},
	{"adb", "android.debug.IAdbManager", false},
	{"alarm", "android.app.IAlarmManager", false},
	{"ambient_context", "android.app.ambientcontext.IAmbientContextManager", false},
	{"android.frameworks.stats.IStats/default", "android.frameworks.stats.IStats", true},
	{"android.hardware.camera.provider.ICameraProvider/internal/0", "", true},
	{"android.hardware.drm.IDrmFactory/clearkey", "android.hardware.drm.IDrmFactory", true},
	{"android.hardware.drm.IDrmFactory/widevine", "android.hardware.drm.IDrmFactory", true},
	{"android.hardware.identity.IIdentityCredentialStore/default", "", true},
	{"android.hardware.light.ILights/default", "", true},
	{"android.hardware.power.IPower/default", "", true},
	{"android.hardware.radio.config.IRadioConfig/default", "", true},
	{"android.hardware.radio.data.IRadioData/slot1", "", true},
	{"android.hardware.radio.messaging.IRadioMessaging/slot1", "", true},
	{"android.hardware.radio.modem.IRadioModem/slot1", "", true},
	{"android.hardware.radio.network.IRadioNetwork/slot1", "", true},
	{"android.hardware.radio.sim.IRadioSim/slot1", "", true},
	{"android.hardware.radio.voice.IRadioVoice/slot1", "", true},
	{"android.hardware.rebootescrow.IRebootEscrow/default", "", true},
	{"android.hardware.security.keymint.IKeyMintDevice/default", "", true},
	{"android.hardware.security.keymint.IRemotelyProvisionedComponent/default", "", true},
	{"android.hardware.security.secureclock.ISecureClock/default", "", true},
	{"android.hardware.security.sharedsecret.ISharedSecret/default", "", true},
	{"android.hardware.vibrator.IVibrator/default", "", true},
	{"android.hardware.vibrator.IVibratorManager/default", "", true},
	{"android.hardware.wifi.supplicant.ISupplicant/default", "", true},
	{"android.security.apc", "android.security.apc.IProtectedConfirmation", true},
	{"android.security.authorization", "android.security.authorization.IKeystoreAuthorization", true},
	{"android.security.compat", "android.security.compat.IKeystoreCompatService", true},
	{"android.security.identity", "android.security.identity.ICredentialStoreFactory", true},
	{"android.security.legacykeystore", "android.security.legacykeystore.ILegacyKeystore", true},
	{"android.security.maintenance", "android.security.maintenance.IKeystoreMaintenance", true},
	{"android.security.metrics", "android.security.metrics.IKeystoreMetrics", true},
	{"android.security.remoteprovisioning", "android.security.remoteprovisioning.IRemoteProvisioning", true},
	{"android.security.remoteprovisioning.IRemotelyProvisionedKeyPool", "android.security.remoteprovisioning.IRemotelyProvisionedKeyPool", true},
	{"android.service.gatekeeper.IGateKeeperService", "", false},
	{"android.system.keystore2.IKeystoreService/default", "android.system.keystore2.IKeystoreService", true},
	{"android.system.suspend.ISystemSuspend/default", "", true},
	{"app_binding", "", false},
	{"app_hibernation", "android.apphibernation.IAppHibernationService", false},
	{"app_integrity", "android.content.integrity.IAppIntegrityManager", false},
	{"app_prediction", "android.app.prediction.IPredictionManager", false},
	{"app_search", "android.app.appsearch.aidl.IAppSearchManager", false},
	{"appops", "com.android.internal.app.IAppOpsService", false},
	{"appwidget", "com.android.internal.appwidget.IAppWidgetService", false},
	{"attestation_verification", "android.security.attestationverification.IAttestationVerificationManagerService", false},
	{"audio", "android.media.IAudioService", false},
	{"auth", "android.hardware.biometrics.IAuthService", false},
	{"autofill", "android.view.autofill.IAutoFillManager", false},
	{"backup", "android.app.backup.IBackupManager", false},
	{"battery", "", false},
	{"batteryproperties", "android.os.IBatteryPropertiesRegistrar", true},
	{"batterystats", "com.android.internal.app.IBatteryStats", false},
	{"binder_calls_stats", "", false},
	{"biometric", "android.hardware.biometrics.IBiometricService", false},
	{"blob_store", "android.app.blob.IBlobStoreManager", false},
	{"bluetooth_manager", "android.bluetooth.IBluetoothManager", false},
	{"bugreport", "android.os.IDumpstate", false},
	{"cacheinfo", "", false},
	{"carrier_config", "com.android.internal.telephony.ICarrierConfigLoader", false},
	{"clipboard", "android.content.IClipboard", false},
	{"color_display", "android.hardware.display.IColorDisplayManager", false},
	{"companiondevice", "android.companion.ICompanionDeviceManager", false},
	{"connectivity", "android.net.IConnectivityManager", false},
	{"connectivity_native", "android.net.connectivity.aidl.ConnectivityNative", false},
	{"connmetrics", "android.net.IIpConnectivityMetrics", false},
	{"consumer_ir", "android.hardware.IConsumerIrService", false},
	{"content", "android.content.IContentService", false},
	{"content_capture", "android.view.contentcapture.IContentCaptureManager", false},
	{"content_suggestions", "android.app.contentsuggestions.IContentSuggestionsManager", false},
	{"country_detector", "android.location.ICountryDetector", false},
	{"cpuinfo", "", false},
	{"crossprofileapps", "android.content.pm.ICrossProfileApps", false},
	{"dataloader_manager", "android.content.pm.IDataLoaderManager", false},
	{"dbinfo", "", false},
	{"device_config", "", false},
	{"device_identifiers", "android.os.IDeviceIdentifiersPolicyService", false},
	{"device_policy", "android.app.admin.IDevicePolicyManager", false},
	{"device_state", "android.hardware.devicestate.IDeviceStateManager", false},
	{"deviceidle", "android.os.IDeviceIdleController", false},
	{"devicestoragemonitor", "", false},
	{"diskstats", "", false},
	{"display", "android.hardware.display.IDisplayManager", false},
	{"dnsresolver", "", true},
	{"domain_verification", "android.content.pm.verify.domain.IDomainVerificationManager", false},
	{"dreams", "android.service.dreams.IDreamManager", false},
	{"drm.drmManager", "drm.IDrmManagerService", true},
	{"dropbox", "com.android.internal.os.IDropBoxManagerService", false},
	{"dynamic_system", "android.os.image.IDynamicSystemService", false},
	{"emergency_affordance", "", false},
	{"external_vibrator_service", "android.os.IExternalVibratorService", false},
	{"file_integrity", "android.security.IFileIntegrityService", false},
	{"fingerprint", "android.hardware.fingerprint.IFingerprintService", false},
	{"font", "com.android.internal.graphics.fonts.IFontManager", false},
	{"game", "android.app.IGameManagerService", false},
	{"gfxinfo", "", false},
	{"gpu", "android.graphicsenv.IGpuService", true},
	{"graphicsstats", "android.view.IGraphicsStats", false},
	{"hardware_properties", "android.os.IHardwarePropertiesManager", false},
	{"imms", "com.android.internal.telephony.IMms", false},
	{"incident", "", true},
	{"incidentcompanion", "android.os.IIncidentCompanion", false},
	{"incremental", "android.os.incremental.IIncrementalService", false},
	{"input", "android.hardware.input.IInputManager", false},
	{"input_method", "com.android.internal.view.IInputMethodManager", false},
	{"inputflinger", "android.os.IInputFlinger", false},
	{"installd", "", true},
	{"ions", "com.android.internal.telephony.IOns", false},
	{"iphonesubinfo", "com.android.internal.telephony.IPhoneSubInfo", false},
	{"ipsec", "android.net.IIpSecService", false},
	{"isms", "com.android.internal.telephony.ISms", false},
	{"isub", "com.android.internal.telephony.ISub", false},
	{"jobscheduler", "android.app.job.IJobScheduler", false},
	{"launcherapps", "android.content.pm.ILauncherApps", false},
	{"legacy_permission", "android.permission.ILegacyPermissionManager", false},
	{"lights", "android.hardware.lights.ILightsManager", false},
	{"locale", "android.app.ILocaleManager", false},
	{"location", "android.location.ILocationManager", false},
	{"location_time_zone_manager", "", false},
	{"lock_settings", "com.android.internal.widget.ILockSettings", false},
	{"logcat", "android.os.logcat.ILogcatManagerService", false},
	{"looper_stats", "", false},
	{"manager", "android.os.IServiceManager", true},
	{"mdns", "", true},
	{"media.audio_flinger", "android.media.IAudioFlingerService", true},
	{"media.audio_policy", "android.media.IAudioPolicyService", true},
	{"media.camera", "android.hardware.ICameraService", true},
	{"media.camera.proxy", "android.hardware.ICameraServiceProxy", true},
	{"media.extractor", "android.IMediaExtractorService", true},
	{"media.metrics", "android.media.IMediaMetricsService", true},
	{"media.player", "android.media.IMediaPlayerService", true},
	{"media.resource_manager", "android.media.IResourceManagerService", true},
	{"media.resource_observer", "android.media.IResourceObserverService", true},
	{"media_communication", "android.media.IMediaCommunicationService", false},
	{"media_metrics", "android.media.metrics.IMediaMetricsManager", false},
	{"media_projection", "android.media.projection.IMediaProjectionManager", false},
	{"media_resource_monitor", "android.media.IMediaResourceMonitor", false},
	{"media_router", "android.media.IMediaRouterService", false},
	{"media_session", "android.media.session.ISessionManager", false},
	{"meminfo", "", false},
	{"memtrack.proxy", "android.hardware.memtrack.IMemtrack", false},
	{"midi", "android.media.midi.IMidiManager", false},
	{"mount", "android.os.storage.IStorageManager", false},
	{"music_recognition", "android.media.musicrecognition.IMusicRecognitionManager", false},
	{"nearby", "android.nearby.INearbyManager", false},
	{"netd", "", true},
	{"netd_listener", "android.net.metrics.INetdEventListener", true},
	{"netpolicy", "android.net.INetworkPolicyManager", false},
	{"netstats", "android.net.INetworkStatsService", false},
	{"network_management", "android.os.INetworkManagementService", false},
	{"network_score", "android.net.INetworkScoreService", false},
	{"network_stack", "android.net.INetworkStackConnector", false},
	{"network_time_update_service", "", false},
	{"network_watchlist", "com.android.internal.net.INetworkWatchlistManager", false},
	{"notification", "android.app.INotificationManager", false},
	{"otadexopt", "android.content.pm.IOtaDexopt", false},
	{"overlay", "android.content.om.IOverlayManager", false},
	{"pac_proxy", "android.net.IPacProxyManager", false},
	{"package", "android.content.pm.IPackageManager", false},
	{"package_native", "android.content.pm.IPackageManagerNative", false},
	{"people", "android.app.people.IPeopleManager", false},
	{"performance_hint", "android.os.IHintManager", false},
	{"permission", "android.os.IPermissionController", false},
	{"permission_checker", "android.permission.IPermissionChecker", false},
	{"permissionmgr", "android.permission.IPermissionManager", false},
	{"phone", "com.android.internal.telephony.ITelephony", false},
	{"pinner", "", false},
	{"platform_compat", "com.android.internal.compat.IPlatformCompat", false},
	{"platform_compat_native", "com.android.internal.compat.IPlatformCompatNative", false},
	{"power", "android.os.IPowerManager", false},
	{"powerstats", "", false},
	{"print", "android.print.IPrintManager", false},
	{"processinfo", "android.os.IProcessInfoService", false},
	{"procstats", "com.android.internal.app.procstats.IProcessStats", false},
	{"reboot_readiness", "android.scheduling.IRebootReadinessManager", false},
	{"recovery", "android.os.IRecoverySystem", false},
	{"resources", "android.content.res.IResourcesManager", false},
	{"restrictions", "android.content.IRestrictionsManager", false},
	{"role", "android.app.role.IRoleManager", false},
	{"rollback", "android.content.rollback.IRollbackManager", false},
	{"runtime", "", false},
	{"safety_center", "android.safetycenter.ISafetyCenterManager", false},
	{"scheduling_policy", "android.os.ISchedulingPolicyService", false},
	{"sdk_sandbox", "android.app.sdksandbox.ISdkSandboxManager", false},
	{"search", "android.app.ISearchManager", false},
	{"search_ui", "android.app.search.ISearchUiManager", false},
	{"sec_key_att_app_id_provider", "android.security.keymaster.IKeyAttestationApplicationIdProvider", false},
	{"secure_element", "android.se.omapi.ISecureElementService", false},
	{"sensor_privacy", "android.hardware.ISensorPrivacyManager", false},
	{"sensorservice", "android.gui.SensorServer", true},
	{"serial", "android.hardware.ISerialManager", false},
	{"servicediscovery", "android.net.nsd.INsdManager", false},
	{"settings", "", false},
	{"shortcut", "android.content.pm.IShortcutService", false},
	{"simphonebook", "com.android.internal.telephony.IIccPhoneBook", false},
	{"slice", "android.app.slice.ISliceManager", false},
	{"smartspace", "android.app.smartspace.ISmartspaceManager", false},
	{"soundtrigger", "com.android.internal.app.ISoundTriggerService", false},
	{"soundtrigger_middleware", "android.media.soundtrigger_middleware.ISoundTriggerMiddlewareService", false},
	{"speech_recognition", "android.speech.IRecognitionServiceManager", false},
	{"stats", "android.os.IStatsd", true},
	{"statsbootstrap", "android.os.IStatsBootstrapAtomService", false},
	{"statscompanion", "android.os.IStatsCompanionService", false},
	{"statsmanager", "android.os.IStatsManagerService", true},
	{"statusbar", "com.android.internal.statusbar.IStatusBarService", false},
	{"storaged", "android.os.IStoraged", true},
	{"storaged_pri", "android.os.storaged.IStoragedPrivate", false},
	{"storagestats", "android.app.usage.IStorageStatsManager", false},
	{"suspend_control", "", true},
	{"suspend_control_internal", "", true},
	{"system_config", "android.os.ISystemConfig", false},
	{"system_server_dumper", "", false},
	{"system_update", "android.os.ISystemUpdateManager", false},
	{"tare", "android.app.tare.IEconomyManager", false},
	{"telecom", "com.android.internal.telecom.ITelecomService", false},
	{"telephony.registry", "com.android.internal.telephony.ITelephonyRegistry", false},
	{"telephony_ims", "android.telephony.ims.aidl.IImsRcsController", false},
	{"testharness", "", false},
	{"tethering", "android.net.ITetheringConnector", false},
	{"textclassification", "android.service.textclassifier.ITextClassifierService", false},
	{"textservices", "com.android.internal.textservice.ITextServicesManager", false},
	{"texttospeech", "android.speech.tts.ITextToSpeechManager", false},
	{"thermalservice", "android.os.IThermalService", true},
	{"time_detector", "android.app.timedetector.ITimeDetectorService", false},
	{"time_zone_detector", "android.app.timezonedetector.ITimeZoneDetectorService", false},
	{"tracing.proxy", "android.tracing.ITracingServiceProxy", false},
	{"translation", "android.view.translation.ITranslationManager", false},
	{"transparency", "com.android.internal.os.IBinaryTransparencyService", false},
	{"trust", "android.app.trust.ITrustManager", false},
	{"uimode", "android.app.IUiModeManager", false},
	{"updatelock", "android.os.IUpdateLock", false},
	{"uri_grants", "android.app.IUriGrantsManager", false},
	{"usagestats", "android.app.usage.IUsageStatsManager", false},
	{"usb", "android.hardware.usb.IUsbManager", false},
	{"user", "android.os.IUserManager", false},
	{"vcn_management", "android.net.vcn.IVcnManagementService", false},
	{"vibrator_manager", "android.os.IVibratorManagerService", false},
	{"virtualdevice", "android.companion.virtual.IVirtualDeviceManager", false},
	{"voiceinteraction", "com.android.internal.app.IVoiceInteractionManagerService", false},
	{"vold", "", true},
	{"vpn_management", "android.net.IVpnManager", false},
	{"wallpaper", "android.app.IWallpaperManager", false},
	{"wallpaper_effects_generation", "android.app.wallpapereffectsgeneration.IWallpaperEffectsGenerationManager", false},
	{"webviewupdate", "android.webkit.IWebViewUpdateService", false},
	{"wifi", "android.net.wifi.IWifiManager", false},
	{"wifinl80211", "", false},
	{"wifip2p", "android.net.wifi.p2p.IWifiP2pManager", false},
	{"wifiscanner", "android.net.wifi.IWifiScanner", false},
	{"window", "android.view.IWindowManager", false},
}

// serviceRegistered reports whether a binder service is published now: native
// services always, framework services once system_server is up (half-way
// through the boot). A name the list does not know but a registry handles
// (cmd/dumpsys) counts as a framework service.
func (d *Device) serviceRegistered(name string) bool {
	for _, s := range binderServices {
		if s.name == name {
			return s.native || d.systemReady()
		}
	}
	_, c := cmdServices[name]
	_, ds := dumpsysServices[name]
	return (c || ds) && d.systemReady()
}

func (d *Device) serviceNames() []string {
	var out []string
	for _, s := range binderServices {
		if s.native || d.systemReady() {
			out = append(out, s.name)
		}
	}
	return out
}

// service list | check NAME. "Found N services:" then "i\tname: [iface]"
// (sorted by name, as servicemanager lists them); "Service NAME: found" /
// "Service NAME: not found".
func cmdService(c *Ctx) int {
	args := c.Args[1:]
	if len(args) == 0 {
		fmt.Fprintln(c.Stderr, "usage: service [-h|-?]\n       service list\n       service check SERVICE\n       service call SERVICE CODE [i32 N | i64 N | f N | d N | s16 STR | null | fd f | nfd n | afd f ] ...")
		return 0
	}
	d := c.Device
	switch args[0] {
	case "list":
		var lines []string
		for _, s := range binderServices {
			if s.native || d.systemReady() {
				lines = append(lines, fmt.Sprintf("%s: [%s]", s.name, s.iface))
			}
		}
		fmt.Fprintf(c.Stdout, "Found %d services:\n", len(lines))
		for i, l := range lines {
			fmt.Fprintf(c.Stdout, "%d\t%s\n", i, l)
		}
		return 0
	case "check":
		if len(args) < 2 {
			return 0
		}
		if d.serviceRegistered(args[1]) {
			fmt.Fprintf(c.Stdout, "Service %s: found\n", args[1])
		} else {
			fmt.Fprintf(c.Stdout, "Service %s: not found\n", args[1])
		}
		return 0
	case "call":
		if len(args) < 3 || !d.serviceRegistered(args[1]) {
			fmt.Fprintf(c.Stderr, "service: Service %s does not exist\n", strings.Join(args[1:min(2, len(args))], ""))
			return 10
		}
		// A void reply: the notification/statusbar calls tools make return nothing.
		fmt.Fprintln(c.Stdout, "Result: Parcel(00000000    '....')")
		return 0
	}
	fmt.Fprintf(c.Stderr, "service: Unknown command %s\n", args[0])
	return 10
}

// --- small tools (toybox) --------------------------------------------------------

func cmdTrue(*Ctx) int  { return 0 }
func cmdFalse(*Ctx) int { return 1 }

// echo [-n] [-e] ARGS...
func cmdEcho(c *Ctx) int {
	args := c.Args[1:]
	nl, esc := true, false
	for len(args) > 0 && len(args[0]) > 1 && args[0][0] == '-' && strings.Trim(args[0][1:], "neE") == "" {
		for _, f := range args[0][1:] {
			switch f {
			case 'n':
				nl = false
			case 'e':
				esc = true
			case 'E':
				esc = false
			}
		}
		args = args[1:]
	}
	s := strings.Join(args, " ")
	if esc {
		s = strings.NewReplacer(`\n`, "\n", `\t`, "\t", `\\`, `\`, `\r`, "\r").Replace(s)
	}
	if nl {
		s += "\n"
	}
	io.WriteString(c.Stdout, s)
	return 0
}

// toyErr prints "<tool>: <path>: <strerror>" as toybox does.
func toyErr(c *Ctx, tool, p string, err error) {
	fmt.Fprintf(c.Stderr, "%s: %s: %s\n", tool, p, errnoText(err))
}

// cat [FILE...]; "-" or no file copies stdin.
func cmdCat(c *Ctx) int {
	files := c.Args[1:]
	if len(files) == 0 {
		files = []string{"-"}
	}
	st := 0
	for _, f := range files {
		if f == "-" {
			io.Copy(c.Stdout, c.Stdin)
			continue
		}
		if strings.HasPrefix(f, "-") {
			continue // -v etc.: no effect on our text files
		}
		b, err := c.Device.ReadFile(c.path(f))
		if err != nil {
			toyErr(c, "cat", f, err)
			st = 1
			continue
		}
		c.Stdout.Write(b)
	}
	return st
}

// ls [-1aAlRdt] [PATH...]. Output not going to a terminal is one name a line
// (toybox ls when stdout is not a tty); -l prints "total N" for directories
// and "perm links user group size YYYY-MM-DD HH:MM name" lines.
func cmdLs(c *Ctx) int {
	var long, all, almost, dirOnly, byTime, recursive bool
	var paths []string
	for _, a := range c.Args[1:] {
		if strings.HasPrefix(a, "-") && len(a) > 1 && a != "--" {
			for _, f := range a[1:] {
				switch f {
				case 'l':
					long = true
				case 'a':
					all = true
				case 'A':
					almost = true
				case 'd':
					dirOnly = true
				case 't':
					byTime = true
				case 'R':
					recursive = true
				}
			}
			continue
		}
		if a != "--" {
			paths = append(paths, a)
		}
	}
	if len(paths) == 0 {
		paths = []string{"."}
	}
	d := c.Device
	st := 0
	var files []lsEntry
	var dirs []string
	for _, p := range paths {
		ap := c.path(p)
		fi, err := d.Stat(ap)
		if err != nil {
			toyErr(c, "ls", p, err)
			st = 1
			continue
		}
		if fi.IsDir() && !dirOnly {
			dirs = append(dirs, p)
			continue
		}
		files = append(files, lsEntry{fi: fi, name: p, full: ap})
	}
	sortLs(files, byTime)
	writeLs(c, files, long)
	multi := len(paths) > 1 || recursive
	for i, p := range dirs {
		if multi {
			if i > 0 || len(files) > 0 {
				fmt.Fprintln(c.Stdout)
			}
			fmt.Fprintf(c.Stdout, "%s:\n", p)
		}
		if lsDir(c, p, long, all, almost, byTime, recursive) != 0 {
			st = 1
		}
	}
	return st
}

type lsEntry struct {
	fi   FileInfo
	name string
	full string
}

func sortLs(es []lsEntry, byTime bool) {
	sort.SliceStable(es, func(i, j int) bool {
		if byTime && !es[i].fi.MTime.Equal(es[j].fi.MTime) {
			return es[i].fi.MTime.After(es[j].fi.MTime)
		}
		return es[i].name < es[j].name
	})
}

func lsDir(c *Ctx, p string, long, all, almost, byTime, recursive bool) int {
	ap := c.path(p)
	entries, err := c.Device.ReadDir(ap)
	if err != nil {
		toyErr(c, "ls", p, err)
		return 1
	}
	var es []lsEntry
	if all {
		self, _ := c.Device.Stat(ap)
		self.Name = "."
		parent, _ := c.Device.Stat(path.Dir(ap))
		parent.Name = ".."
		es = append(es, lsEntry{fi: self, name: ".", full: ap}, lsEntry{fi: parent, name: "..", full: path.Dir(ap)})
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name, ".") && !all && !almost {
			continue
		}
		es = append(es, lsEntry{fi: e, name: e.Name, full: path.Join(ap, e.Name)})
	}
	sortLs(es, byTime)
	if long {
		var blocks int64
		for _, e := range es {
			blocks += (e.fi.Size + 4095) / 4096 * 4
		}
		fmt.Fprintf(c.Stdout, "total %d\n", blocks)
	}
	writeLs(c, es, long)
	if recursive {
		for _, e := range es {
			if e.fi.IsDir() && e.name != "." && e.name != ".." {
				sub := path.Join(p, e.name)
				fmt.Fprintf(c.Stdout, "\n%s:\n", sub)
				lsDir(c, sub, long, all, almost, byTime, true)
			}
		}
	}
	return 0
}

func modeString(m uint32) string {
	b := []byte("?rwxrwxrwx")
	switch m & sIFMT {
	case sIFDIR:
		b[0] = 'd'
	case sIFREG:
		b[0] = '-'
	case sIFLNK:
		b[0] = 'l'
	}
	for i := 0; i < 9; i++ {
		if m&(1<<(8-i)) == 0 {
			b[i+1] = '-'
		}
	}
	return string(b)
}

func writeLs(c *Ctx, es []lsEntry, long bool) {
	if !long {
		for _, e := range es {
			fmt.Fprintln(c.Stdout, e.name)
		}
		return
	}
	type row struct{ mode, links, user, group, size, date, name string }
	rows := make([]row, len(es))
	var w [6]int
	for i, e := range es {
		o := c.Device.nodeOwner(e.full)
		links := "1"
		if e.fi.IsDir() {
			links = "2"
		}
		rows[i] = row{modeString(e.fi.Mode), links, o.user, o.group, strconv.FormatInt(e.fi.Size, 10), e.fi.MTime.UTC().Format("2006-01-02 15:04"), e.name}
		for j, s := range []string{rows[i].links, rows[i].user, rows[i].group, rows[i].size} {
			w[j] = max(w[j], len(s))
		}
	}
	for _, r := range rows {
		fmt.Fprintf(c.Stdout, "%s %*s %-*s %-*s %*s %s %s\n", r.mode, w[0], r.links, w[1], r.user, w[2], r.group, w[3], r.size, r.date, r.name)
	}
}

// rm [-r] [-f] PATH...
func cmdRm(c *Ctx) int {
	var rec, force bool
	var paths []string
	opts := true
	for _, a := range c.Args[1:] {
		if opts && a == "--" {
			opts = false
			continue
		}
		if opts && strings.HasPrefix(a, "-") && len(a) > 1 {
			rec = rec || strings.ContainsAny(a, "rR")
			force = force || strings.Contains(a, "f")
			continue
		}
		paths = append(paths, a)
	}
	if len(paths) == 0 && !force {
		fmt.Fprintln(c.Stderr, "rm: Needs 1 argument (see \"rm --help\")")
		return 1
	}
	st := 0
	d := c.Device
	for _, p := range paths {
		ap := canon(c.path(p))
		fi, err := d.lstat(ap)
		if err != nil {
			if !(force && errors.Is(err, fs.ErrNotExist)) {
				toyErr(c, "rm", p, err)
				st = 1
			}
			continue
		}
		if fi.IsDir() && !rec {
			fmt.Fprintf(c.Stderr, "rm: %s: is a directory\n", p)
			st = 1
			continue
		}
		d.mu.Lock()
		err = d.removeLocked(ap, rec)
		d.mu.Unlock()
		if err != nil {
			toyErr(c, "rm", p, err)
			st = 1
		}
	}
	return st
}

// mkdir [-p] [-m MODE] DIR...
func cmdMkdir(c *Ctx) int {
	parents := false
	var dirs []string
	args := c.Args[1:]
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			dirs = append(dirs, args[i+1:]...)
			i = len(args)
		case a == "-m":
			i++
		case strings.HasPrefix(a, "-") && len(a) > 1:
			parents = parents || strings.Contains(a, "p")
		default:
			dirs = append(dirs, a)
		}
	}
	st := 0
	for _, p := range dirs {
		if err := c.Device.mkdir(c.path(p), parents); err != nil {
			toyErr(c, "mkdir", p, err)
			st = 1
		}
	}
	return st
}

// touch [-acm] FILE...
func cmdTouch(c *Ctx) int {
	st := 0
	for _, a := range c.Args[1:] {
		if strings.HasPrefix(a, "-") {
			continue
		}
		if err := c.Device.touch(c.path(a)); err != nil {
			toyErr(c, "touch", a, err)
			st = 1
		}
	}
	return st
}

// id: the shell user's identity. The group list is that of API 31+ images
// (ext_data_rw, ext_obb_rw, readtracefs appear there); API 29-30 lack those.
func cmdID(c *Ctx) int {
	groups := "2000(shell),1004(input),1007(log),1011(adb),1015(sdcard_rw),1028(sdcard_r),1078(ext_data_rw),1079(ext_obb_rw),3001(net_bt_admin),3002(net_bt),3003(inet),3006(net_bw_stats),3009(readproc),3011(uhid),3012(readtracefs)"
	if c.Device.APILevel() < 31 {
		groups = "2000(shell),1004(input),1007(log),1011(adb),1015(sdcard_rw),1028(sdcard_r),3001(net_bt_admin),3002(net_bt),3003(inet),3006(net_bw_stats),3009(readproc),3011(uhid)"
	}
	fmt.Fprintf(c.Stdout, "uid=2000(shell) gid=2000(shell) groups=%s context=u:r:shell:s0\n", groups)
	return 0
}

func cmdWhoami(c *Ctx) int { fmt.Fprintln(c.Stdout, "shell"); return 0 }

// sleep SECONDS (fractions allowed); returns early when the context ends.
func cmdSleep(c *Ctx) int {
	if len(c.Args) < 2 {
		fmt.Fprintln(c.Stderr, "sleep: Needs 1 argument (see \"sleep --help\")")
		return 1
	}
	secs, err := strconv.ParseFloat(strings.TrimSuffix(c.Args[1], "s"), 64)
	if err != nil {
		fmt.Fprintf(c.Stderr, "sleep: invalid time interval '%s'\n", c.Args[1])
		return 1
	}
	t := time.NewTimer(time.Duration(secs * float64(time.Second)))
	defer t.Stop()
	select {
	case <-t.C:
		return 0
	case <-c.Context.Done():
		return 130
	}
}

// which NAME...: /system/bin/NAME for known commands; exit 1 if any is missing.
func cmdWhich(c *Ctx) int {
	st := 0
	for _, n := range c.Args[1:] {
		if _, ok := commands[n]; ok || n == "sh" {
			fmt.Fprintf(c.Stdout, "/system/bin/%s\n", n)
		} else {
			st = 1
		}
	}
	return st
}

// grep [-e PAT] [-E] [-F] [-v] [-i] [-c] [-q] [-n] [-o] PATTERN [FILE...]
func cmdGrep(c *Ctx) int {
	var pats []string
	var ext, fixed, invert, icase, count, quiet, number, only bool
	var files []string
	args := c.Args[1:]
	havePat := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "-e" && i+1 < len(args) {
			pats = append(pats, args[i+1])
			havePat = true
			i++
			continue
		}
		if strings.HasPrefix(a, "-") && len(a) > 1 {
			for _, f := range a[1:] {
				switch f {
				case 'E':
					ext = true
				case 'F':
					fixed = true
				case 'v':
					invert = true
				case 'i':
					icase = true
				case 'c':
					count = true
				case 'q':
					quiet = true
				case 'n':
					number = true
				case 'o':
					only = true
				}
			}
			continue
		}
		if !havePat {
			pats = append(pats, a)
			havePat = true
			continue
		}
		files = append(files, a)
	}
	if !havePat {
		fmt.Fprintln(c.Stderr, "grep: no pattern")
		return 2
	}
	var res []*regexp.Regexp
	for _, p := range pats {
		expr := p
		if fixed {
			expr = regexp.QuoteMeta(p)
		} else if !ext {
			expr = basicToERE(p)
		}
		if icase {
			expr = "(?i)" + expr
		}
		re, err := regexp.Compile(expr)
		if err != nil {
			fmt.Fprintf(c.Stderr, "grep: bad regex '%s'\n", p)
			return 2
		}
		res = append(res, re)
	}
	var input []byte
	if len(files) == 0 {
		input, _ = io.ReadAll(c.Stdin)
	} else {
		for _, f := range files {
			b, err := c.Device.ReadFile(c.path(f))
			if err != nil {
				if !quiet {
					toyErr(c, "grep", f, err)
				}
				continue
			}
			input = append(input, b...)
		}
	}
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(input))
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	line := 0
	for sc.Scan() {
		line++
		l := sc.Text()
		var hit []string
		for _, re := range res {
			if only {
				hit = append(hit, re.FindAllString(l, -1)...)
			} else if re.MatchString(l) {
				hit = append(hit, l)
				break
			}
		}
		matched := len(hit) > 0
		if matched == invert {
			continue
		}
		n++
		if quiet || count {
			continue
		}
		prefix := ""
		if number {
			prefix = strconv.Itoa(line) + ":"
		}
		if only && !invert {
			for _, h := range hit {
				fmt.Fprintf(c.Stdout, "%s%s\n", prefix, h)
			}
		} else {
			fmt.Fprintf(c.Stdout, "%s%s\n", prefix, l)
		}
	}
	if count && !quiet {
		fmt.Fprintln(c.Stdout, n)
	}
	if n == 0 {
		return 1
	}
	return 0
}

// basicToERE turns a POSIX basic regex into Go syntax: \| \( \) \{ \} \+ \?
// are operators, bare ( ) { } | + ? are literals.
func basicToERE(p string) string {
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		ch := p[i]
		if ch == '\\' && i+1 < len(p) {
			n := p[i+1]
			if strings.IndexByte("|(){}+?", n) >= 0 {
				b.WriteByte(n)
			} else {
				b.WriteByte('\\')
				b.WriteByte(n)
			}
			i++
			continue
		}
		if strings.IndexByte("|(){}+?", ch) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(ch)
	}
	return b.String()
}

// appops set|get …: silent on set, as AppOpsService's shell command.
func cmdAppops(c *Ctx) int {
	args := c.Args[1:]
	if len(args) > 0 && args[0] == "get" && len(args) > 1 {
		fmt.Fprintln(c.Stdout, "No operations.")
	}
	return 0
}

// dumpsys deviceidle [whitelist [+PKG|-PKG]...]: "Added: PKG" / "Removed: PKG"
// (DeviceIdleController's shell command); a bare whitelist lists
// "user,PKG,UID" lines of the packages added.
func dumpsysDeviceidle(c *Ctx) int {
	args := c.Args[1:]
	d := c.Device
	if len(args) == 0 || args[0] != "whitelist" {
		return 0
	}
	if len(args) == 1 {
		d.mu.Lock()
		ids := make([]string, 0, len(d.settings["deviceidle.whitelist"]))
		for id := range d.settings["deviceidle.whitelist"] {
			ids = append(ids, id)
		}
		d.mu.Unlock()
		sort.Strings(ids)
		for _, id := range ids {
			uid, _ := d.packageUID(id)
			fmt.Fprintf(c.Stdout, "user,%s,%d\n", id, uid)
		}
		return 0
	}
	for _, a := range args[1:] {
		if len(a) < 2 || (a[0] != '+' && a[0] != '-') {
			continue
		}
		pkg := a[1:]
		if _, ok := d.packageUID(pkg); !ok {
			fmt.Fprintf(c.Stdout, "Unknown package: %s\n", pkg)
			continue
		}
		d.mu.Lock()
		if d.settings["deviceidle.whitelist"] == nil {
			d.settings["deviceidle.whitelist"] = map[string]string{}
		}
		if a[0] == '+' {
			d.settings["deviceidle.whitelist"][pkg] = "1"
		} else {
			delete(d.settings["deviceidle.whitelist"], pkg)
		}
		d.mu.Unlock()
		if a[0] == '+' {
			fmt.Fprintf(c.Stdout, "Added: %s\n", pkg)
		} else {
			fmt.Fprintf(c.Stdout, "Removed: %s\n", pkg)
		}
	}
	return 0
}

func init() {
	registerCommand("true", cmdTrue)
	registerCommand("false", cmdFalse)
	registerCommand("echo", cmdEcho)
	registerCommand("cat", cmdCat)
	registerCommand("ls", cmdLs)
	registerCommand("rm", cmdRm)
	registerCommand("mkdir", cmdMkdir)
	registerCommand("touch", cmdTouch)
	registerCommand("id", cmdID)
	registerCommand("whoami", cmdWhoami)
	registerCommand("sleep", cmdSleep)
	registerCommand("which", cmdWhich)
	registerCommand("grep", cmdGrep)
	registerCommand("logcat", cmdLogcat)
	registerCommand("service", cmdService)
	registerCommand("appops", cmdAppops)
	registerDumpsys("deviceidle", dumpsysDeviceidle)
}
