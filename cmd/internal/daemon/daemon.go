// Package daemon is the composition root of screengraph-agent: it builds the
// daemon `serve` runs (New) and the host `run` and `runs resume` drive runs on
// (OpenHost), in one direction: store, policies, NATS and relay, adb and
// Appium, setup graph and evidence, then the run service with its engine,
// then the HTTP and NATS APIs over the service. Nothing is assigned to a
// piece after it is built; one zerolog.Logger (Config.Log) is passed down.
// The main package only maps flags and config to Config.
package daemon

import (
	"context"
	"crypto/rand"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

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
	"github.com/screengraph/screengraph-agent/nodes"
	"github.com/screengraph/screengraph-agent/snapshots"
	"github.com/screengraph/screengraph-agent/snapshots/natsbus"
	"github.com/screengraph/screengraph-agent/snapshots/natsbus/natsapi"
	"github.com/screengraph/screengraph-agent/snapshots/postgres"
	"github.com/screengraph/screengraph-agent/snapshots/relay"
	"github.com/screengraph/screengraph-agent/snapshots/sqlite"
)

// Daemon is a built daemon: its host, run service, HTTP server and NATS
// control subscription. Run serves until ctx ends, then stops them all.
type Daemon struct {
	cfg     Config
	Host    *Host
	Service *service.Service
	lock    interface{ Close() error }
	ln      net.Listener
	conns   *httpapi.ConnGuard
	sub     interface{ Unsubscribe() error }
	run     service.Daemon
	// appiumDown gates the scheduler while the local Appium is replaced.
	appiumDown *atomic.Bool
}

func newID() string { return ulid.MustNew(ulid.Now(), rand.Reader).String() }

// New builds the daemon of cfg: it takes the data dir's lock, refuses an
// exposed listener without API tokens (CheckExposure), opens the host,
// listens on cfg.Listen, and builds the service (its engine committing
// through the service's store), the HTTP API and the NATS control
// subscription. Errors are agent errors (the agent error format); on one,
// what New started is stopped.
func New(ctx context.Context, cfg Config) (d *Daemon, err error) {
	log := cfg.Log
	if cfg.PprofListen != "" {
		servePprof(cfg.PprofListen, log)
	}
	d = &Daemon{cfg: cfg, appiumDown: new(atomic.Bool)}
	defer func() {
		if err != nil {
			d.close()
			d = nil
		}
	}()
	// The lease holder is this process's instance id: it names neither the
	// host nor the data dir (it shows in /v1/devices). The data dir's lock
	// names the previous daemon's, whose leases Start takes back (at once on
	// the embedded store; in a fleet once Postgres saw them expire).
	holder := "serve:" + newID()
	lock, predecessor, err := sqlite.LockDataDir(cfg.DataDir, holder)
	if err != nil {
		return d, agent.Wrap(agent.ErrInvalidRequest, err, "data dir")
	}
	d.lock = lock
	if err := CheckExposure(ctx, cfg); err != nil {
		return d, err
	}
	// Descriptors: HTTP gets its share (LimitConns below), the in-process
	// NATS server's clients a quarter of that, the rest stays for adb,
	// Appium, the store and downloads.
	connLimits := httpapi.ConnLimitsFor(httpapi.DescriptorLimit())
	artifactsCfg := cfg.Artifacts()
	hc := HostConfig{DataDir: cfg.DataDir, DatabaseURL: cfg.DatabaseURL, NATSReplicas: cfg.NATSReplicas,
		StreamMaxAge: cfg.Retention, StreamMaxBytes: cfg.StreamMaxBytes,
		ADBServer: cfg.ADBServer, AppiumURL: cfg.Appium, AppiumBinary: cfg.AppiumBinary, PolicyFiles: cfg.Policies,
		Log: log, Progress: func(node, line string) { log.Debug().Str("node", node).Msg(line) },
		// Tenancy: the embedded NATS checks API tokens.
		NATSTokens: true, NATSMaxConns: max(16, connLimits.MaxConns/4),
		Artifacts: &artifactsCfg, ArtifactStore: cfg.ArtifactStore, ArtifactStoreEndpoint: cfg.ArtifactStoreEndpoint}
	if cfg.NATSURL != "" {
		hc.NATSURL = cfg.NATSURL
	} else {
		hc.NATSListen = cfg.NATSListen
	}
	if d.Host, err = OpenHost(ctx, hc); err != nil {
		return d, err
	}
	h := d.Host
	if d.ln, err = net.Listen("tcp", cfg.Listen); err != nil {
		if h.AppiumStart > 0 {
			// This serve started the data dir's local Appium (it is
			// detached, for later runs to reuse): a serve that does not
			// start leaves nothing running behind it.
			appium.StopLocal(cfg.DataDir)
		}
		return d, agent.Wrap(agent.ErrInvalidRequest, err, "--listen %s", cfg.Listen)
	}
	return d, d.build(holder, sqlite.PredecessorPrefix(cfg.DataDir, predecessor), connLimits)
}

// build makes the service (and its engine), the metrics, the HTTP API and
// the NATS control subscription over d.Host.
func (d *Daemon) build(holder, holderPrefix string, connLimits httpapi.ConnLimits) (err error) {
	cfg, h, log := d.cfg, d.Host, d.cfg.Log
	if d.Service, err = service.New(d.serviceConfig(holder, holderPrefix)); err != nil {
		return err
	}
	svc := d.Service
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(relay.Metrics(h.Relay)...)
	reg.MustRegister(relay.OutboxMetrics(h.Store)...)
	if err := svc.RegisterMetrics(reg, h.Store); err != nil {
		return err
	}
	apiCfg, background := d.tenancy()
	apiCfg.Service, apiCfg.Graph, apiCfg.Gatherer, apiCfg.Registerer, apiCfg.AllowedHosts = svc, h.Graph, reg, reg, cfg.AllowedHosts
	apiCfg.Logf, apiCfg.ClockSkew = logf(log, zerolog.ErrorLevel), service.ClockSkew(h.Store)
	apiCfg.Ready = map[string]func(context.Context) error{
		"store":  service.StoreReady(h.Store),
		"adb":    adbdevice.Inventory{ADB: h.ADB}.Ready,
		"outbox": (&relay.OutboxWatch{Counter: h.Store, Relay: h.Relay}).Check,
		"nats":   h.Bus.Ready,
	}
	api := httpapi.New(apiCfg)
	sub, err := natsapi.Subscribe(natsapi.Config{Conn: h.Bus.Conn, Service: svc, Prefix: snapshots.ControlSubjectPrefix,
		Replies: natsbus.ControlReplies(natsapi.DefaultOwnInboxPrefix), ReplyReasons: natsbus.ControlReplyReasons, Registerer: reg,
		Logf: logf(log, zerolog.WarnLevel)})
	if err != nil {
		return agent.Wrap(agent.ErrNetwork, err, "NATS control subscription")
	}
	d.sub = sub
	// Retention: every daemon of a fleet runs a cleaner; the store lets one
	// prune at a time and the others find nothing left.
	cleaner := &retention.Cleaner{Store: h.Store, Retention: cfg.Retention, Evidence: h.Store, Blobs: h.Blobs,
		Logf: logf(log, zerolog.InfoLevel)}
	// Floods: the HTTP connections are capped below the descriptor limit,
	// whose rest stays for adb, Appium, the store and NATS (httpapi/conns.go).
	srv := httpapi.NewServer(api, httpapi.DefaultLimits)
	lln, conns := httpapi.LimitConns(srv, d.ln, connLimits)
	d.conns = conns
	reg.MustRegister(conns.Metrics()...)
	d.run = service.Daemon{Service: svc, Server: srv, Listener: lln,
		Background: append(background, cleaner.Run),
		Ready:      d.ready,
		Log:        daemonLog(log),
	}
	return nil
}

// serviceConfig is the run service of the daemon. The scheduler gives each
// run a device its deviceName matches among those this host reaches.
// Fleet: the shared queue holds every host's runs, and a run none of them
// matches is left to the daemons that can serve it; one host: such a run
// starts on its name as given, so EnsureDevice tells what is wrong
// (device_not_found, offline). Other daemons' new runs and lease releases
// wake the scheduler through the store (Postgres NOTIFY); the tick is the
// fallback for what notifies no one (a lease that expired, a notification
// lost with a reconnect). While the daemon's own Appium server is being
// replaced, no run starts: each would fail at once with appium_unreachable
// and use up its retries.
func (d *Daemon) serviceConfig(holder, holderPrefix string) service.Config {
	cfg, h, log := d.cfg, d.Host, d.cfg.Log
	return service.Config{
		Store: h.Store, Leases: h.Store,
		// The engine commits through the service's store, so followers wake.
		NewRunner: func(st agent.Store) service.Runner {
			return agent.GraphRunner{Engine: h.EngineOn(st, logf(log, zerolog.WarnLevel)), Graph: h.Graph}
		},
		Prepare:       nodes.SetupPreparer{Policies: h.Policies, Artifacts: h.Artifacts},
		Devices:       adbdevice.Inventory{ADB: h.ADB},
		Screens:       adbdevice.Inventory{ADB: h.ADB}, // the inspector's live screen: adb exec-out screencap -p
		Policy:        h.Policies,
		DefaultTenant: cfg.Tenant,
		Holder:        holder, HolderPrefix: holderPrefix, HostID: h.HostID, Identity: h.Reach,
		// Fleet: the predecessor's leases only once the store saw them expire.
		SharedLeases: cfg.DatabaseURL != "",
		LeaseTTL:     cfg.LeaseTTL, NewID: newID, PendingTimeout: cfg.PendingTimeout, MaxPendingPerTenant: cfg.MaxPendingPerTenant,
		Probe: adbdevice.NewBootCompletedProbe(h.ADB), Reachable: appium.Gate{Reachability: h.Reach, Down: d.appiumDown},
		StartUnmatched: cfg.DatabaseURL == "", Tick: time.Second,
		Logf:      logf(log, zerolog.InfoLevel),
		Artifacts: h.Store, Blobs: h.Blobs,
	}
}

// tenancy is the HTTP API's authentication, token revocation and token
// routes over the host's store, and the revocation watch to run beside the
// service. A revoked token's open HTTP requests and embedded-NATS
// connections end within agent.RevocationBound (the store is polled, so a
// revoke by the CLI or another daemon of the fleet counts too). A store
// without tokens gives the open API.
func (d *Daemon) tenancy() (httpapi.Config, []func(context.Context)) {
	h, log := d.Host, d.cfg.Log
	tokens, _ := h.Store.(agent.Tokens)
	if tokens == nil {
		return httpapi.Config{}, nil
	}
	revocations := &agent.RevocationWatch{Tokens: tokens, Logf: logf(log, zerolog.WarnLevel)}
	if h.Bus.Server != nil {
		revocations.OnPoll(func(revoked func(string) bool) {
			natsbus.DisconnectRevoked(h.Bus.Server, revoked, logf(log, zerolog.InfoLevel))
		})
	}
	return httpapi.Config{Tokens: tokens, Revocations: revocations, TokenAdmin: TokenAdmin(tokens)},
		[]func(context.Context){revocations.Run}
}

// TokenAdmin serves the token routes over ts, issuing tokens with
// natsbus.IssueToken (the SHA-256 the API checks and the bcrypt hash a
// generated nats-server configuration carries).
func TokenAdmin(ts agent.Tokens) *httpapi.TokenAdmin {
	return &httpapi.TokenAdmin{Store: ts, Issue: natsbus.IssueToken}
}

// ready tells systemd (Type=notify) and the log that the daemon serves.
func (d *Daemon) ready() {
	log := d.cfg.Log
	if err := notifySystemd("READY=1"); err != nil {
		log.Warn().Err(err).Msg("sd_notify READY=1")
	}
	log.Info().Str("http", "http://"+d.ln.Addr().String()).Str("nats", agent.RedactString(d.Host.NATSClientURL)).
		Int("http_max_conns", d.conns.Limits().MaxConns).Int("http_max_conns_per_addr", d.conns.Limits().MaxConnsPerAddr).
		Str("data_dir", d.cfg.DataDir).Str("holder", d.Service.Holder()).Msg("serving")
	if d.cfg.Ready != nil {
		d.cfg.Ready()
	}
}

// Run serves until ctx ends (service.Daemon: start, serve, then the stop in
// order), supervising the local Appium when the daemon started it, then
// closes the host and releases the data dir.
func (d *Daemon) Run(ctx context.Context) error {
	defer d.close()
	if d.cfg.Appium == "" {
		// The daemon owns its local Appium: a crashed one is restarted.
		go appium.SuperviseLocal(ctx, d.cfg.DataDir, d.cfg.AppiumBinary, adbPort(d.cfg.ADBServer), d.Host.AppiumURL, d.appiumDown,
			logf(d.cfg.Log, zerolog.WarnLevel))
	}
	return d.run.Run(ctx)
}

// close stops what New started, in reverse order; safe on a partly built
// daemon.
func (d *Daemon) close() {
	if d.sub != nil {
		d.sub.Unsubscribe()
	}
	if d.run.Server == nil && d.ln != nil {
		d.ln.Close() // never served
	}
	d.Host.Close(context.Background())
	if d.lock != nil {
		d.lock.Close()
	}
}

// CheckExposure refuses a non-loopback Listen or NATSListen (the in-process
// NATS server's; not used with NATSURL) while the store holds no API token,
// unless InsecureNoAuth, which is logged as a warning
// (httpapi.CheckExposure). It runs before anything listens; the store is
// opened for the question only when some address is not loopback.
func CheckExposure(ctx context.Context, cfg Config) error {
	ls := []httpapi.Listen{{Flag: "--listen", Addr: cfg.Listen}}
	if cfg.NATSURL == "" {
		ls = append(ls, httpapi.Listen{Flag: "--nats-listen", Addr: cfg.NATSListen})
	}
	open, err := httpapi.CheckExposure(ctx, ls, func(ctx context.Context) (bool, error) {
		st, err := OpenAdminStore(ctx, cfg.DataDir, cfg.DatabaseURL)
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
			cfg.Log.Warn().Str("flag", l.Flag).Str("addr", l.Addr).Msg("INSECURE: listening beyond loopback with --insecure-no-auth: while the store holds no API token, anyone who reaches this address can submit, read and cancel runs")
		}
	}
	return nil
}

// AdminStore is a store the admin commands open themselves (token …, runs
// prune, serve's exposure check), with or without a daemon on it.
type AdminStore interface {
	agent.Store
	agent.Leases
	agent.Tokens
	agent.Pruner
	Close() error
}

// OpenAdminStore opens the fleet's Postgres at databaseURL (without
// LISTEN), else the embedded store of dataDir ("" = sqlite.DataDir()).
// Errors: network_error naming the redacted connection string, process_error
// naming the data dir.
func OpenAdminStore(ctx context.Context, dataDir, databaseURL string) (AdminStore, error) {
	if databaseURL != "" {
		s, err := postgres.Open(ctx, databaseURL, postgres.Options{NoListen: true})
		if err != nil {
			return nil, agent.Wrap(agent.ErrNetwork, err, "Postgres %s", postgres.RedactConnString(databaseURL))
		}
		return s, nil
	}
	if dataDir == "" {
		d, err := sqlite.DataDir()
		if err != nil {
			return nil, err
		}
		dataDir = d
	}
	s, err := sqlite.Open(ctx, filepath.Join(dataDir, "agent.db"), sqlite.Options{})
	if err != nil {
		return nil, agent.Wrap(agent.ErrProcess, err, "embedded store in %s", dataDir)
	}
	return s, nil
}

// OpenExistingStore opens the embedded store of dataDir, which must exist:
// the runs commands read a store, they never create one. Errors:
// invalid_request_error naming the path and hint (what to pass instead)
// for a data dir with no agent.db (an empty table there read as "no runs"
// when the user meant another data dir or a daemon that was down).
func OpenExistingStore(ctx context.Context, dataDir, hint string) (*sqlite.Store, error) {
	p := filepath.Join(dataDir, "agent.db")
	if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
		return nil, agent.Errorf(agent.ErrInvalidRequest, "no local store at %s (%s)", p, hint)
	}
	return sqlite.Open(ctx, p, sqlite.Options{})
}
