package main

import (
	"context"
	"crypto/rand"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/confmap"
	"github.com/knadh/koanf/providers/env/v2"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/v2"
	"github.com/oklog/ulid/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/rs/zerolog"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/httpapi"
	"github.com/screengraph/screengraph-agent/agent/retention"
	"github.com/screengraph/screengraph-agent/agent/service"
	"github.com/screengraph/screengraph-agent/appium"
	"github.com/screengraph/screengraph-agent/device/adbdevice"
	"github.com/screengraph/screengraph-agent/device/artifacts"
	"github.com/screengraph/screengraph-agent/nodes"
	"github.com/screengraph/screengraph-agent/snapshots"
	"github.com/screengraph/screengraph-agent/snapshots/natsbus"
	"github.com/screengraph/screengraph-agent/snapshots/natsbus/natsapi"
	"github.com/screengraph/screengraph-agent/snapshots/postgres"
	"github.com/screengraph/screengraph-agent/snapshots/relay"
	"github.com/screengraph/screengraph-agent/snapshots/sqlite"
)

// DefaultListen is where the daemon's HTTP API listens, and where the CLI's
// client commands look for it.
const DefaultListen = "127.0.0.1:7420"

// daemonConfig is serve's configuration, merged by koanf from (lowest
// first) defaults, the config file (YAML or JSON), SCREENGRAPH_* environment
// variables (SCREENGRAPH_DATA_DIR -> data-dir) and the flags given.
type daemonConfig struct {
	Listen    string `koanf:"listen" json:"listen"`
	DataDir   string `koanf:"data-dir" json:"dataDir"`
	ADBServer string `koanf:"adb-server" json:"adbServer"`
	Appium    string `koanf:"appium" json:"appium"`
	// AppiumBinary: the local Appium's executable (appium.Locate).
	AppiumBinary string `koanf:"appium-binary" json:"appiumBinary"`
	NATSListen   string `koanf:"nats-listen" json:"natsListen"`
	NATSURL      string `koanf:"nats-url" json:"natsUrl"`
	// DatabaseURL: fleet mode on a shared Postgres (a postgres:// URL or keyword/value pairs).
	DatabaseURL  string        `koanf:"database-url" json:"databaseUrl"`
	NATSReplicas int           `koanf:"nats-replicas" json:"natsReplicas"`
	Policies     []string      `koanf:"policy" json:"policy"`
	Tenant       string        `koanf:"tenant" json:"tenant"`
	LeaseTTL     time.Duration `koanf:"lease-ttl" json:"leaseTtl"`
	// PendingTimeout, MaxPendingPerTenant: the scheduler's queue
	// (service.Config).
	PendingTimeout      time.Duration `koanf:"pending-timeout" json:"pendingTimeout"`
	MaxPendingPerTenant int           `koanf:"max-pending-per-tenant" json:"maxPendingPerTenant"`
	PprofListen         string        `koanf:"pprof-listen" json:"pprofListen"`
	// Artifact fetching on a tenant's behalf (artifacts.Config).
	ArtifactFileRoots     []string      `koanf:"artifact-file-root" json:"artifactFileRoot"`
	ArtifactAllowCIDRs    []string      `koanf:"artifact-allow-cidr" json:"artifactAllowCidr"`
	ArtifactS3Buckets     []string      `koanf:"artifact-s3-bucket" json:"artifactS3Bucket"`
	ArtifactMaxBytes      string        `koanf:"artifact-max-bytes" json:"artifactMaxBytes"`
	ArtifactIdleTimeout   time.Duration `koanf:"artifact-idle-timeout" json:"artifactIdleTimeout"`
	ArtifactCacheMaxBytes string        `koanf:"artifact-cache-max-bytes" json:"artifactCacheMaxBytes"`
	// Evidence blobs: the data dir's, or a bucket (s3://bucket/prefix).
	ArtifactStore         string `koanf:"artifact-store" json:"artifactStore"`
	ArtifactStoreEndpoint string `koanf:"artifact-store-endpoint" json:"artifactStoreEndpoint"`
	// Retention: ended runs (and AGENT_EVENTS messages) older than it go.
	Retention      time.Duration `koanf:"retention" json:"retention"`
	StreamMaxBytes int64         `koanf:"stream-max-bytes" json:"streamMaxBytes"`
	// AllowedHosts: Host names the HTTP API answers besides its listen
	// address (httpapi.Config.AllowedHosts).
	AllowedHosts []string `koanf:"allowed-host" json:"allowedHost"`
	// InsecureNoAuth: listen beyond loopback although the store holds no
	// API token (httpapi.CheckExposure).
	InsecureNoAuth bool `koanf:"insecure-no-auth" json:"insecureNoAuth"`
}

// artifacts is the fetcher configuration of cfg.
func (cfg daemonConfig) artifacts() artifacts.Config {
	return artifacts.Config{FileRoots: cfg.ArtifactFileRoots, AllowCIDRs: cfg.ArtifactAllowCIDRs, S3Buckets: cfg.ArtifactS3Buckets,
		MaxBytes: cfg.ArtifactMaxBytes, IdleTimeout: cfg.ArtifactIdleTimeout, CacheMaxBytes: cfg.ArtifactCacheMaxBytes}
}

// envListKeys are config keys whose SCREENGRAPH_* variable holds a
// comma-separated list, by the variable's key (plural where the flag is
// repeatable).
var envListKeys = map[string]string{"policy": "policy", "artifact-file-roots": "artifact-file-root", "artifact-file-root": "artifact-file-root",
	"artifact-allow-cidr": "artifact-allow-cidr", "artifact-allow-cidrs": "artifact-allow-cidr",
	"artifact-s3-bucket": "artifact-s3-bucket", "artifact-s3-buckets": "artifact-s3-bucket",
	"allowed-host": "allowed-host", "allowed-hosts": "allowed-host"}

type serveCmd struct {
	Listen         string        `help:"HTTP API address (default ${default_listen})." placeholder:"HOST:PORT"`
	DataDir        string        `help:"Data directory (embedded store, NATS files, artifacts; default ~/.local/share/screengraph-agent)." name:"data-dir" type:"path"`
	ADBServer      string        `help:"adb server HOST:PORT (default: 127.0.0.1:$ANDROID_ADB_SERVER_PORT or 5037)." name:"adb-server"`
	Appium         string        `help:"Appium server URL; default: a local one started for this data dir."`
	AppiumBinary   string        `help:"Appium executable of the local server (default: the checkout's, appium on PATH, $APPIUM_HOME's, or the one setup appium installed in the data dir)." name:"appium-binary" placeholder:"PATH"`
	NATSListen     string        `help:"Address the in-process NATS server (JetStream) listens on, for any NATS client (default 127.0.0.1:4222)." name:"nats-listen"`
	NATSURL        string        `help:"Publish events to this NATS server or cluster (comma-separated URLs) instead of the in-process one." name:"nats-url"`
	DatabaseURL    string        `help:"Fleet mode: keep runs, events, outbox and device leases in this shared Postgres (a postgres:// URL or libpq keyword/value pairs such as host=… user=… dbname=…) instead of the embedded store; migrated at start." name:"database-url"`
	NATSReplicas   int           `help:"Replicas of the AGENT_EVENTS stream (default 1; 3 on a three-node JetStream cluster)." name:"nats-replicas"`
	Policy         []string      `help:"Policy documents (YAML/JSON) to add; the first becomes current." type:"existingfile"`
	Tenant         string        `help:"Tenant of runs submitted without tenantId (default local)."`
	LeaseTTL       time.Duration `help:"Device lease TTL (renewed every TTL/3; default 30s)." name:"lease-ttl"`
	PendingTimeout time.Duration `help:"A PENDING run whose device name no daemon of the fleet has reached for this long fails once with device_not_found (default 10m)." name:"pending-timeout"`
	MaxPending     int           `help:"Refuse (429) a run of a tenant that already has this many PENDING runs (default 0: no cap)." name:"max-pending-per-tenant"`
	Retention      time.Duration `help:"Delete ended runs (events, outbox rows, snapshots, control rows, lease history) whose last status change is older than this, and age AGENT_EVENTS messages out after it (default 720h; at least 1h). Runs with unpublished outbox rows are kept." name:"retention"`
	StreamMaxBytes int64         `help:"Size limit of the AGENT_EVENTS stream in bytes; the oldest messages go first (default 536870912, 512 MiB)." name:"stream-max-bytes"`
	Config         string        `help:"Config file (YAML or JSON) with the keys of the flags above." type:"existingfile"`
	PrintConfig    bool          `help:"Print the merged configuration as --config reads it (YAML; JSON with --output json; secrets redacted) and exit." name:"print-config"`
	Output         string        `help:"Output format of --print-config (text: YAML) and failures: text or json." default:"text" enum:"text,json"`
	PprofListen    string        `help:"Serve Go runtime profiles (/debug/pprof/) on this address (off by default)." name:"pprof-listen" hidden:""`

	ArtifactFileRoot      []string      `help:"file:// artifact references resolve (after .. and symlinks) only under these directories (repeatable; SCREENGRAPH_ARTIFACT_FILE_ROOTS comma-separated); none: file:// refused." name:"artifact-file-root" placeholder:"DIR"`
	ArtifactAllowCIDR     []string      `help:"Destination ranges https artifact downloads may reach although a rule refuses them (loopback, private, link-local, CGNAT…; repeatable)." name:"artifact-allow-cidr" placeholder:"CIDR"`
	ArtifactS3Bucket      []string      `help:"Once API tokens exist, the only S3 buckets s3:// references may name (repeatable)." name:"artifact-s3-bucket" placeholder:"NAME"`
	ArtifactMaxBytes      string        `help:"Largest artifact, plain bytes or with a unit (default 2GiB)." name:"artifact-max-bytes" placeholder:"SIZE"`
	ArtifactIdleTimeout   time.Duration `help:"A download whose body sends nothing for this long ends (default 60s)." name:"artifact-idle-timeout"`
	ArtifactCacheMaxBytes string        `help:"Size cap of the artifact cache; least recently used artifacts are deleted beyond it (default: none)." name:"artifact-cache-max-bytes" placeholder:"SIZE"`
	ArtifactStore         string        `help:"Where evidence artifacts (screenshots, UI hierarchies, logcats) are kept: s3://bucket/prefix, a bucket every daemon of a fleet shares (credentials: the AWS SDK's default chain); default the data dir's evidence/." name:"artifact-store" placeholder:"s3://BUCKET/PREFIX"`
	ArtifactStoreEndpoint string        `help:"S3 endpoint URL of --artifact-store (MinIO, a test server; path-style requests); default AWS's." name:"artifact-store-endpoint" placeholder:"URL"`

	AllowedHost    []string `help:"A Host name the HTTP API answers besides its listen address and localhost (NAME: any port; NAME:PORT; repeatable; SCREENGRAPH_ALLOWED_HOSTS comma-separated). Other Host headers are refused (421; DNS rebinding)." name:"allowed-host" placeholder:"NAME"`
	InsecureNoAuth bool     `help:"Listen on a non-loopback --listen or --nats-listen although the store holds no API token (anyone reaching it may submit and read runs; logged as a warning)." name:"insecure-no-auth"`
}

func (c *serveCmd) load() (daemonConfig, error) {
	k := koanf.New(".")
	defaults := map[string]any{
		"listen": DefaultListen, "nats-listen": "127.0.0.1:4222", "tenant": "local", "lease-ttl": "30s", "pending-timeout": "10m", "nats-replicas": 1,
		"retention": retention.DefaultRetention.String(), "stream-max-bytes": natsbus.DefaultStreamMaxBytes,
		"adb-server": adbAddr(""),
		// What the daemon uses when these are not set, so --print-config
		// shows the real values (artifacts.Options' zero values mean them).
		"artifact-idle-timeout": artifacts.DefaultIdleTimeout.String(),
		"artifact-max-bytes":    strconv.FormatInt(artifacts.DefaultMaxBytes, 10),
	}
	if err := k.Load(confmap.Provider(defaults, "."), nil); err != nil {
		return daemonConfig{}, err
	}
	if c.Config != "" {
		// Read apart first: a key that is not a flag name (a typo, the
		// camelCase of an older --print-config) is refused, not ignored.
		fk := koanf.New(".")
		if err := fk.Load(file.Provider(c.Config), yaml.Parser()); err != nil {
			return daemonConfig{}, agent.Wrap(agent.ErrInvalidRequest, err, "--config %s", c.Config)
		}
		if err := checkConfigKeys(fk.Raw(), "--config "+c.Config); err != nil {
			return daemonConfig{}, err
		}
		if err := k.Merge(fk); err != nil {
			return daemonConfig{}, err
		}
	}
	known := configKeys()
	if err := k.Load(env.Provider(".", env.Opt{Prefix: "SCREENGRAPH_", TransformFunc: func(key, v string) (string, any) {
		key = strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(key, "SCREENGRAPH_")), "_", "-")
		if !slices.Contains(known, key) && envListKeys[key] == "" {
			return "", nil // SCREENGRAPH_TOKEN, SCREENGRAPH_SERVER, …: the client commands'
		}
		if list, ok := envListKeys[key]; ok {
			return list, strings.Split(v, ",")
		}
		return key, v
	}}), nil); err != nil {
		return daemonConfig{}, err
	}
	if err := k.Load(confmap.Provider(c.serveFlagValues(), "."), nil); err != nil {
		return daemonConfig{}, err
	}
	var cfg daemonConfig
	if err := k.UnmarshalWithConf("", &cfg, koanf.UnmarshalConf{Tag: "koanf"}); err != nil {
		return daemonConfig{}, agent.Wrap(agent.ErrInvalidRequest, err, "configuration")
	}
	if cfg.DataDir == "" {
		d, err := sqlite.DataDir()
		if err != nil {
			return cfg, err
		}
		cfg.DataDir = d
	}
	if cfg.LeaseTTL <= 0 {
		return cfg, agent.Errorf(agent.ErrInvalidRequest, "lease-ttl must be > 0")
	}
	if cfg.PendingTimeout <= 0 || cfg.MaxPendingPerTenant < 0 {
		return cfg, agent.Errorf(agent.ErrInvalidRequest, "pending-timeout must be > 0 and max-pending-per-tenant >= 0")
	}
	// The default tenant is a NATS subject token and a scope as is: the one
	// rule of tenant ids (agent.ValidTenantID), whichever source set it.
	// Empty is the service's default (local).
	if cfg.Tenant != "" && !agent.ValidTenantID(cfg.Tenant) {
		return cfg, agent.InvalidTenantID("tenant (--tenant, config key tenant, SCREENGRAPH_TENANT)", cfg.Tenant)
	}
	if cfg.Retention < time.Hour {
		return cfg, agent.Errorf(agent.ErrInvalidRequest, "retention must be at least 1h, not %v", cfg.Retention)
	}
	if cfg.StreamMaxBytes < 1<<20 {
		return cfg, agent.Errorf(agent.ErrInvalidRequest, "stream-max-bytes must be at least 1 MiB (1048576), not %d", cfg.StreamMaxBytes)
	}
	if cfg.NATSReplicas < 1 || cfg.NATSReplicas > 5 {
		return cfg, agent.Errorf(agent.ErrInvalidRequest, "nats-replicas must be 1 to 5, not %d", cfg.NATSReplicas)
	}
	if len(cfg.AllowedHosts) > httpapi.MaxAllowedHosts {
		return cfg, agent.Errorf(agent.ErrInvalidRequest, "allowed-host: at most %d names, not %d", httpapi.MaxAllowedHosts, len(cfg.AllowedHosts))
	}
	for _, h := range cfg.AllowedHosts {
		if err := httpapi.CheckAllowedHost(h); err != nil {
			return cfg, err
		}
	}
	// Both of libpq's forms (a URL, keyword/value pairs), as pgx reads them.
	if cfg.DatabaseURL != "" {
		if err := postgres.CheckConnString(cfg.DatabaseURL); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

// checkExposure refuses a non-loopback --listen or --nats-listen (the
// in-process NATS server's; not used with --nats-url) while the store holds
// no API token, unless --insecure-no-auth, which is logged as a warning
// (httpapi.CheckExposure). It runs before anything listens; the store is
// opened for the question only when some address is not loopback.
func checkExposure(ctx context.Context, cfg daemonConfig, log zerolog.Logger) error {
	ls := []httpapi.Listen{{Flag: "--listen", Addr: cfg.Listen}}
	if cfg.NATSURL == "" {
		ls = append(ls, httpapi.Listen{Flag: "--nats-listen", Addr: cfg.NATSListen})
	}
	open, err := httpapi.CheckExposure(ctx, ls, func(ctx context.Context) (bool, error) {
		st, err := tokenStoreFlags{DataDir: cfg.DataDir, DatabaseURL: cfg.DatabaseURL}.open(ctx)
		if err != nil {
			return false, err
		}
		defer st.Close()
		return st.HasTokens(ctx)
	}, cfg.InsecureNoAuth)
	if err != nil {
		return err
	}
	if len(open) > 0 && cfg.InsecureNoAuth {
		for _, l := range open {
			log.Warn().Str("flag", l.Flag).Str("addr", l.Addr).Msg("INSECURE: listening beyond loopback with --insecure-no-auth: while the store holds no API token, anyone who reaches this address can submit, read and cancel runs")
		}
	}
	return nil
}

func (c *serveCmd) fail(err error) error {
	if c.Output == "json" {
		printJSON(httpapi.ErrorBody(err, ""))
	}
	return exitError{code: 2, err: err}
}

func (c *serveCmd) Run(ctx context.Context, g *Globals) error {
	cfg, err := c.load()
	if err != nil {
		return c.fail(err)
	}
	if c.PrintConfig {
		// What --config reads: the same keys, durations as "30s" (config.go).
		b, err := printConfig(cfg, c.Output)
		if err != nil {
			return c.fail(err)
		}
		_, err = os.Stdout.Write(b)
		return err
	}
	log := g.logger()
	if cfg.PprofListen != "" {
		servePprof(cfg.PprofListen, log)
	}
	newID := func() string { return ulid.MustNew(ulid.Now(), rand.Reader).String() }
	// The lease holder is this process's instance id: it names neither the
	// host nor the data dir (it shows in /v1/devices). The data dir's lock
	// names the previous daemon's, whose leases Start takes back (at once on
	// the embedded store; in a fleet once Postgres saw them expire).
	holder := "serve:" + newID()
	lock, predecessor, err := sqlite.LockDataDir(cfg.DataDir, holder)
	if err != nil {
		return c.fail(agent.Wrap(agent.ErrInvalidRequest, err, "data dir"))
	}
	defer lock.Close()
	if err := checkExposure(ctx, cfg, log); err != nil {
		return c.fail(err)
	}

	hc := hostConfig{DataDir: cfg.DataDir, DatabaseURL: cfg.DatabaseURL, NATSReplicas: cfg.NATSReplicas,
		StreamMaxAge: cfg.Retention, StreamMaxBytes: cfg.StreamMaxBytes,
		ADBServer: cfg.ADBServer, AppiumURL: cfg.Appium, AppiumBinary: cfg.AppiumBinary, PolicyFiles: cfg.Policies,
		Log: log, Progress: func(node, line string) { log.Debug().Str("node", node).Msg(line) }}
	if cfg.NATSURL != "" {
		hc.NATSURL = cfg.NATSURL
	} else {
		hc.NATSListen = cfg.NATSListen
	}
	ac := cfg.artifacts()
	hc.Artifacts = &ac
	hc.ArtifactStore, hc.ArtifactStoreEndpoint = cfg.ArtifactStore, cfg.ArtifactStoreEndpoint
	// Descriptors: HTTP gets its share (LimitConns below), the in-process
	// NATS server's clients a quarter of that, the rest stays for adb,
	// Appium, the store and downloads.
	connLimits := httpapi.ConnLimitsFor(httpapi.DescriptorLimit())
	hc.NATSMaxConns = max(16, connLimits.MaxConns/4)
	hc.NATSTokens, hc.NATSLog = true, func(format string, args ...any) { log.Warn().Msgf(format, args...) } // tenancy: the embedded NATS checks API tokens
	h, err := openHost(ctx, hc)
	if err != nil {
		return c.fail(err)
	}
	defer h.Close(context.Background())
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		if h.AppiumStart > 0 {
			// This serve started the data dir's local Appium (it is
			// detached, for later runs to reuse): a serve that does not
			// start leaves nothing running behind it.
			appium.StopLocal(cfg.DataDir)
		}
		return c.fail(agent.Wrap(agent.ErrInvalidRequest, err, "--listen %s", cfg.Listen))
	}

	// The scheduler gives each run a device its deviceName matches among
	// those this host reaches. Fleet: the shared queue holds every host's
	// runs, and a run none of them matches is left to the daemons that can
	// serve it; one host: such a run starts on its name as given, so
	// EnsureDevice tells what is wrong (device_not_found, offline).
	reach := h.reach
	// Other daemons' new runs and lease releases wake the scheduler through
	// the store (Postgres NOTIFY); the tick is the fallback for what
	// notifies no one (a lease that expired, a notification lost with a
	// reconnect).
	tick := time.Second
	// While the daemon's own Appium server is being replaced, no run starts:
	// each would fail at once with appium_unreachable and use up its retries.
	var appiumDown atomic.Bool
	svc, err := service.New(service.Config{
		Store: h.store, Leases: h.store,
		Prepare:       nodes.SetupPreparer{Policies: h.policies, Artifacts: h.artifacts},
		Devices:       adbdevice.Inventory{ADB: h.adb},
		Screens:       adbdevice.Inventory{ADB: h.adb}, // the inspector's live screen: adb exec-out screencap -p
		Policy:        h.policies,
		DefaultTenant: cfg.Tenant,
		Holder:        holder, HolderPrefix: sqlite.PredecessorPrefix(cfg.DataDir, predecessor), HostID: h.hostID, Identity: reach,
		// Fleet: the predecessor's leases only once the store saw them expire.
		SharedLeases: cfg.DatabaseURL != "",
		LeaseTTL:     cfg.LeaseTTL, NewID: newID, PendingTimeout: cfg.PendingTimeout, MaxPendingPerTenant: cfg.MaxPendingPerTenant,
		Probe: adbdevice.NewBootCompletedProbe(h.adb), Reachable: appium.Gate{Reachability: reach, Down: &appiumDown}, StartUnmatched: cfg.DatabaseURL == "", Tick: tick,
		Logf:      func(format string, args ...any) { log.Info().Msgf(format, args...) },
		Artifacts: h.store, Blobs: h.blobs,
	})
	if err != nil {
		return c.fail(err)
	}
	// The engine commits through the service's store, so followers wake.
	h.engine.Store = svc.Store()
	h.engine.Logf = func(format string, args ...any) { log.Warn().Msgf(format, args...) }
	svc.SetRunner(agent.GraphRunner{Engine: h.engine, Graph: h.graph})

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(relay.Metrics(h.relay)...)
	reg.MustRegister(relay.OutboxMetrics(h.store)...)
	if err := svc.RegisterMetrics(reg, h.store); err != nil {
		return c.fail(err)
	}
	// Revocation: a revoked token's open HTTP requests and embedded-NATS
	// connections end within agent.RevocationBound (the store is polled, so
	// a revoke by the CLI or another daemon of the fleet counts too).
	var revocations *agent.RevocationWatch
	var background []func(context.Context)
	if ts := storeTokens(h.store); ts != nil {
		revocations = &agent.RevocationWatch{Tokens: ts, Logf: func(format string, args ...any) { log.Warn().Msgf(format, args...) }}
		if h.bus.Server != nil {
			revocations.OnPoll(func(revoked func(string) bool) {
				natsbus.DisconnectRevoked(h.bus.Server, revoked, func(format string, args ...any) { log.Info().Msgf(format, args...) })
			})
		}
		background = append(background, revocations.Run)
	}
	api := httpapi.New(httpapi.Config{Service: svc, Graph: h.graph, Gatherer: reg, Registerer: reg, Tokens: storeTokens(h.store), Revocations: revocations, AllowedHosts: cfg.AllowedHosts,
		Logf:      func(format string, args ...any) { log.Error().Msgf(format, args...) },
		ClockSkew: service.ClockSkew(h.store),
		Ready: map[string]func(context.Context) error{
			"store":  service.StoreReady(h.store),
			"adb":    adbdevice.Inventory{ADB: h.adb}.Ready,
			"outbox": (&relay.OutboxWatch{Counter: h.store, Relay: h.relay}).Check,
			"nats":   h.bus.Ready,
		}})
	sub, err := natsapi.Subscribe(natsapi.Config{Conn: h.nc, Service: svc, Prefix: snapshots.ControlSubjectPrefix,
		Replies: natsbus.ControlReplies(natsapi.DefaultOwnInboxPrefix), ReplyReasons: natsbus.ControlReplyReasons, Registerer: reg,
		Logf: func(format string, args ...any) { log.Warn().Msgf(format, args...) }})
	if err != nil {
		return c.fail(agent.Wrap(agent.ErrNetwork, err, "NATS control subscription"))
	}
	defer sub.Unsubscribe()
	if cfg.Appium == "" {
		// The daemon owns its local Appium: a crashed one is restarted.
		go appium.SuperviseLocal(ctx, cfg.DataDir, cfg.AppiumBinary, adbPort(cfg.ADBServer), h.AppiumURL, &appiumDown,
			func(format string, args ...any) { log.Warn().Msgf(format, args...) })
	}
	// Retention: every daemon of a fleet runs a cleaner; the store lets one
	// prune at a time and the others find nothing left.
	cleaner := &retention.Cleaner{Store: h.store, Retention: cfg.Retention, Evidence: h.store, Blobs: h.blobs,
		Logf: func(format string, args ...any) { log.Info().Msgf(format, args...) }}
	// Floods: the HTTP connections are capped below the descriptor limit,
	// whose rest stays for adb, Appium, the store and NATS (httpapi/conns.go).
	srv := httpapi.NewServer(api, httpapi.DefaultLimits)
	lln, conns := httpapi.LimitConns(srv, ln, connLimits)
	reg.MustRegister(conns.Metrics()...)
	err = service.Daemon{Service: svc, Server: srv, Listener: lln,
		Background: append(background, cleaner.Run),
		Ready: func() {
			// systemd (Type=notify): ready once the API listens and runs resume.
			if err := notifySystemd("READY=1"); err != nil {
				log.Warn().Err(err).Msg("sd_notify READY=1")
			}
			log.Info().Str("http", "http://"+ln.Addr().String()).Str("nats", agent.RedactString(h.NATSClientURL)).
				Int("http_max_conns", conns.Limits().MaxConns).Int("http_max_conns_per_addr", conns.Limits().MaxConnsPerAddr).
				Str("data_dir", cfg.DataDir).Str("holder", svc.Holder()).Msg("serving")
		},
		Log: func(level slog.Level, msg string, err error) { log.WithLevel(zerologLevel(level)).Err(err).Msg(msg) },
	}.Run(ctx)
	if err != nil {
		return c.fail(err)
	}
	return nil
}

// zerologLevel is the zerolog level of a service.Daemon log line.
func zerologLevel(l slog.Level) zerolog.Level {
	switch {
	case l >= slog.LevelError:
		return zerolog.ErrorLevel
	case l >= slog.LevelWarn:
		return zerolog.WarnLevel
	case l >= slog.LevelInfo:
		return zerolog.InfoLevel
	}
	return zerolog.DebugLevel
}
