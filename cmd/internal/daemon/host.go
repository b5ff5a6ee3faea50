package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/rs/zerolog"

	"github.com/screengraph/screengraph-agent/adb"
	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/service"
	"github.com/screengraph/screengraph-agent/appium"
	"github.com/screengraph/screengraph-agent/device"
	"github.com/screengraph/screengraph-agent/device/adbdevice"
	"github.com/screengraph/screengraph-agent/device/artifacts"
	"github.com/screengraph/screengraph-agent/device/evidence"
	"github.com/screengraph/screengraph-agent/emulator"
	"github.com/screengraph/screengraph-agent/nodes"
	"github.com/screengraph/screengraph-agent/policy"
	"github.com/screengraph/screengraph-agent/snapshots"
	"github.com/screengraph/screengraph-agent/snapshots/blobs"
	"github.com/screengraph/screengraph-agent/snapshots/natsbus"
	"github.com/screengraph/screengraph-agent/snapshots/postgres"
	"github.com/screengraph/screengraph-agent/snapshots/relay"
	"github.com/screengraph/screengraph-agent/snapshots/sqlite"
)

// HostConfig is what a single host runs with: the embedded default store, a
// NATS JetStream (in-process, or an external server), the shared adb server
// and an Appium server.
type HostConfig struct {
	DataDir string
	// DatabaseURL puts the host on a shared Postgres (fleet mode) instead
	// of the embedded store in DataDir.
	DatabaseURL string
	// NATSReplicas is the AGENT_EVENTS stream's replica count (1 on the
	// embedded server; 3 on a three-node cluster).
	NATSReplicas int
	// StreamMaxAge and StreamMaxBytes limit the AGENT_EVENTS stream (0:
	// natsbus.DefaultStreamMaxAge and DefaultStreamMaxBytes).
	StreamMaxAge   time.Duration
	StreamMaxBytes int64
	ADBServer      string // host:port
	AppiumURL      string // "" starts a local Appium
	// AppiumBinary is the local Appium's executable (--appium-binary); ""
	// means appium.Locate's search.
	AppiumBinary string
	PolicyFile   string
	// PolicyFiles are added to the policy store as well (serve --policy).
	PolicyFiles []string
	// NATSURL publishes to an external NATS server; otherwise an in-process
	// one listens on NATSListen (host:port; "" = 127.0.0.1 and a random port).
	NATSURL    string
	NATSListen string
	// Log is the one logger of the host and of every piece it builds
	// (their Logf funcs are its levels, log.go).
	Log zerolog.Logger
	// Progress sees node progress lines live; may be nil.
	Progress func(node, line string)
	// NATSTokens (serve) makes the embedded NATS server authenticate its
	// clients against the store's API tokens (natsbus.TokenAuth); the
	// connections it refuses are logged as warnings.
	NATSTokens bool
	// NATSMaxConns caps the in-process NATS server's clients (0: its
	// default): they hold this process's descriptors (serve).
	NATSMaxConns int
	// Artifacts, when set (serve), confines artifact fetching on tenants'
	// behalf; nil (run) fetches what the user's own process may.
	Artifacts *artifacts.Config
	// ArtifactStore is where evidence blobs go: "" for DataDir/evidence,
	// s3://bucket/prefix for a bucket the fleet shares (credentials from
	// the AWS SDK's default chain); ArtifactStoreEndpoint a custom S3
	// endpoint (MinIO, gofakes3; path-style).
	ArtifactStore         string
	ArtifactStoreEndpoint string
}

// HostStore is what the host needs of a store: runs, events, outbox and
// device leases (sqlite.Store on one host, postgres.Store in a
// fleet).
type HostStore interface {
	agent.Store
	agent.Leases
	agent.ParkedLister
	snapshots.OutboxCounter
	agent.Pruner
	agent.ArtifactIndex
	agent.StoreClock
}

// Both stores initialise the policy store's keys in one transaction.
var (
	_ policy.KVInit = (*postgres.Store)(nil)
	_ policy.KVInit = (*sqlite.Store)(nil)
)

// Host holds a host's running pieces (store, policies, NATS, relay, adb,
// Appium driver, setup graph, engine over the store); Close stops them in
// reverse order, after the relay has published what the runs committed.
// `run` and `runs resume` drive runs on a Host; a Daemon serves one.
type Host struct {
	Config   HostConfig
	Store    HostStore
	Policies *policy.Store
	// Bus is the NATS side (in-process server, connection, publisher).
	Bus     *natsbus.Bus
	Relay   *relay.Relay
	relayBg *relay.Background
	ADB     *adb.Client
	// HostID identifies the adb server's machine (device.HostID): the
	// leases of AVDs this host boots are keyed agent.DeviceKey(HostID,
	// AVD name). Reach lists the devices and reads their identities
	// (service.Keys): a connected device's lease is keyed by what the
	// device says of itself, whichever host or daemon asks.
	HostID string
	Reach  *adbdevice.Reachable
	Driver *appium.Client
	// Engine commits to Store (run, runs resume); a Daemon builds its own
	// over the service's store (EngineOn).
	Engine *agent.Engine
	Graph  *agent.Graph
	// Setup is what Graph was built from.
	Setup nodes.SetupDeps
	// Blobs keeps the evidence artifacts' bytes (the rows are the store's).
	Blobs agent.BlobStore
	// Artifacts is the fetcher ProvisionApp uses (serve checks
	// references with it at submission).
	Artifacts *artifacts.Fetcher
	// recorder, evidence and handover are the engine's screen recorder
	// (video evidence), evidence capturer and device handover, shared by
	// every engine of the host.
	recorder *evidence.Recorder
	evidence *evidence.Capturer
	handover *evidence.Handover
	// idle carries WaitIdle's idle screen to the success evidence.
	idle *evidence.IdleScreens
	// NATSClientURL is where the events are published (nats://host:port).
	NATSClientURL string
	// AppiumURL is the Appium server the driver talks to.
	AppiumURL string
	// AppiumStart is how long starting the local Appium server took (0 when
	// one was reused or an external one was given).
	AppiumStart time.Duration
}

// EngineOn is an engine of the host committing through st (the host's
// store, or the service's wrapper of it); logf reports its warnings (nil
// drops them).
func (h *Host) EngineOn(st agent.Store, logf func(format string, args ...any)) *agent.Engine {
	return &agent.Engine{Store: st, Policies: h.Policies, Recorder: h.recorder, Evidence: h.evidence, Handover: h.handover, Logf: logf}
}

func adbPort(addr string) int {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 5037
	}
	n, _ := strconv.Atoi(p)
	return n
}

// openHost starts the host's pieces. On failure it stops what it started and
// returns a nil host with an error classified for the agent error format.
func OpenHost(ctx context.Context, cfg HostConfig) (*Host, error) {
	h := &Host{Config: cfg, ADB: adb.New(cfg.ADBServer)}
	if err := h.open(ctx); err != nil {
		// h is the partly opened host (never nil here): Close stops what
		// open started.
		h.Close(context.Background())
		return nil, err
	}
	return h, nil
}

func (h *Host) open(ctx context.Context) (err error) {
	cfg := h.Config
	if err := sqlite.PrepareDataDir(cfg.DataDir); err != nil {
		return err
	}
	if h.HostID, err = device.HostID(ctx, cfg.ADBServer); err != nil {
		return agent.Wrap(agent.ErrInvalidRequest, err, "identifying the adb server's machine")
	}
	h.Reach = adbdevice.NewReachable(h.ADB, emulator.ForDataDir(cfg.DataDir, cfg.ADBServer, nil).ListAVDs)
	for _, step := range []func(context.Context) error{h.openStore, h.openBus, h.openAppium, h.openSetup} {
		if err := step(ctx); err != nil {
			return err
		}
	}
	if h.Blobs, err = blobs.Open(ctx, filepath.Join(cfg.DataDir, "evidence"), cfg.ArtifactStore, cfg.ArtifactStoreEndpoint); err != nil {
		return err
	}
	h.openEvidence()
	h.Engine = h.EngineOn(h.Store, nil)
	return nil
}

// openStore opens the store (the fleet's Postgres, else the data dir's
// embedded one) and its policies, adding the policy files.
func (h *Host) openStore(ctx context.Context) (err error) {
	cfg := h.Config
	if cfg.DatabaseURL != "" {
		// Migrates under goose's advisory lock: daemons starting together
		// migrate once.
		pg, err := postgres.Open(ctx, cfg.DatabaseURL, postgres.Options{Log: cfg.Log})
		if err != nil {
			return agent.Wrap(agent.ErrNetwork, err, "Postgres %s", postgres.RedactConnString(cfg.DatabaseURL))
		}
		h.Store = pg
	} else {
		emb, err := sqlite.Open(ctx, filepath.Join(cfg.DataDir, "agent.db"), sqlite.Options{})
		if err != nil {
			return agent.Wrap(agent.ErrProcess, err, "embedded store")
		}
		h.Store = emb
	}
	if h.Policies, err = policy.NewStore(ctx, h.Store); err != nil {
		return agent.Wrap(agent.ErrProcess, err, "policies")
	}
	// run --policy runs under its policy; serve's first --policy becomes current.
	files := cfg.PolicyFiles
	if cfg.PolicyFile != "" {
		files = append(files, cfg.PolicyFile)
	}
	return h.Policies.AddFiles(ctx, files, cfg.PolicyFile)
}

// openBus opens NATS (the in-process server or cfg.NATSURL's) and starts
// the relay from the store's outbox to it.
func (h *Host) openBus(ctx context.Context) (err error) {
	cfg := h.Config
	bc := natsbus.BusConfig{URL: cfg.NATSURL, Listen: cfg.NATSListen, Dir: filepath.Join(cfg.DataDir, "nats"),
		Replicas: cfg.NATSReplicas, MaxAge: cfg.StreamMaxAge, MaxBytes: cfg.StreamMaxBytes,
		NotReady: func(err error) {
			cfg.Log.Warn().Err(err).Str("nats", agent.RedactString(cfg.NATSURL)).Msg("NATS JetStream not ready; events wait in the outbox until it is")
		}}
	bc.MaxConns = cfg.NATSMaxConns
	if cfg.NATSTokens {
		bc.Tokens, bc.TokenLog = h.Store, logf(cfg.Log, zerolog.WarnLevel)
	}
	if h.Bus, err = natsbus.OpenBus(ctx, bc); err != nil {
		return err
	}
	h.NATSClientURL = h.Bus.ClientURL
	// Runs publish side by side (each strictly in order): a daemon drives
	// up to one run per device, and 4 at a time left 32 devices queueing.
	h.Relay = &relay.Relay{Store: h.Store, Publisher: h.Bus.Publisher, Log: cfg.Log, Concurrency: 64}
	h.relayBg = relay.Start(h.Relay)
	return nil
}

// openAppium reaches Appium (cfg.AppiumURL, else the data dir's local
// server, started when none runs) and makes its driver.
func (h *Host) openAppium(ctx context.Context) (err error) {
	cfg := h.Config
	url := cfg.AppiumURL
	if url == "" {
		// A local Appium that outlives the run, so the next run reuses it and
		// its session (`screengraph-agent appium stop` ends it).
		if url, h.AppiumStart, err = appium.Local(ctx, cfg.DataDir, cfg.AppiumBinary, adbPort(cfg.ADBServer)); err != nil {
			// The error names the places searched and the fix (appium.Locate).
			return agent.Wrap(agent.ErrAppiumUnreachable, err, "starting a local Appium server")
		}
	}
	h.AppiumURL = url
	if h.Driver, err = appium.New(url, appium.Options{}); err != nil {
		return agent.Wrap(agent.ErrInvalidRequest, err, "--appium")
	}
	return nil
}

// openArtifacts is the artifact fetcher of the data dir's cache, with
// serve's download rules (cfg.Artifacts) when given.
func (h *Host) openArtifacts() (*artifacts.Fetcher, error) {
	cfg := h.Config
	aopt := artifacts.Options{CacheDir: filepath.Join(cfg.DataDir, "artifacts")}
	if cfg.Artifacts != nil {
		var tenanted func(context.Context) (bool, error)
		if ts, ok := h.Store.(agent.Tokens); ok {
			tenanted = ts.HasTokens
		}
		var err error
		if aopt, err = cfg.Artifacts.DaemonOptions(aopt.CacheDir, tenanted); err != nil {
			return nil, err
		}
	}
	fetcher, err := artifacts.New(aopt)
	if err != nil {
		var ae *agent.Error
		if errors.As(err, &ae) {
			return nil, err
		}
		return nil, agent.Wrap(agent.ErrProcess, err, "artifact cache")
	}
	return fetcher, nil
}

// openSetup builds the setup graph's ports and the graph.
func (h *Host) openSetup(context.Context) (err error) {
	cfg := h.Config
	if h.Artifacts, err = h.openArtifacts(); err != nil {
		return err
	}
	// WaitIdle's idle screen goes to the success evidence (evidence.IdleScreens).
	h.idle = &evidence.IdleScreens{}
	h.Setup = nodes.SetupDeps{
		Ports: nodes.Ports{
			IdleScreens:   h.idle,
			Driver:        h.Driver,
			Resolve:       adbdevice.NewResolver(h.ADB, adbdevice.ReconnectGrace),
			Emulators:     emulator.ForDataDir(cfg.DataDir, cfg.ADBServer, nil),
			ADBServerPort: adbPort(cfg.ADBServer),
			Capabilities: func(serial string, adbPort int) (map[string]any, error) {
				return appium.Capabilities(appium.CapsConfig{Serial: serial, ADBPort: adbPort})
			},
		},
		DeviceFor: func(serial string) device.Device { return adbdevice.NewADBDevice(h.ADB, serial) },
		Sessions:  nodes.StoreSessions{KV: h.Store, Server: h.AppiumURL},
		Provision: nodes.ProvisionDeps{Artifacts: h.Artifacts, Verifications: &nodes.StoreVerifications{KV: h.Store},
			TempDir: filepath.Join(cfg.DataDir, "tmp")},
		Progress: cfg.Progress,
	}
	if h.Graph, err = nodes.NewSetupGraph(h.Setup); err != nil {
		return agent.Wrap(agent.ErrInternal, err, "setup graph")
	}
	return nil
}

// openEvidence makes the video recorder, the evidence capturer and the
// lease handover over the host's blobs, driver and store.
func (h *Host) openEvidence() {
	warnf := logf(h.Config.Log, zerolog.WarnLevel)
	h.recorder = &evidence.Recorder{
		DeviceFor: func(serial string) device.Device { return adbdevice.NewADBDevice(h.ADB, serial) },
		Settings:  videoSettings, FirstNode: policy.NodeLaunchOrAttach,
		Logf: warnf, Transport: h.ADB.LastTransportID,
	}
	h.evidence = &evidence.Capturer{
		Video:     h.recorder,
		Blobs:     h.Blobs,
		DeviceFor: func(serial string) device.Device { return adbdevice.NewADBDevice(h.ADB, serial) },
		Driver:    h.Driver,
		Kinds:     policy.EvidenceKinds,
		Logf:      warnf,
		Idle:      h.idle,
	}
	h.handover = &evidence.Handover{
		Leases: h.Store,
		Runs:   h.Store,
		KV:     h.Store,
		DeviceFor: func(serial string) device.Device {
			return adbdevice.NewADBDevice(h.ADB, serial).WithReconnectGrace(0)
		},
		Logf: warnf,
	}
}

// Close stops the relay, then publishes what is left in the outbox (bounded:
// Drain runs only once Run has returned), then stops NATS and the store.
// It is safe on a partly opened host.
func (h *Host) Close(ctx context.Context) {
	if h == nil {
		return
	}
	if err := h.relayBg.Stop(ctx, 10*time.Second); err != nil {
		h.Config.Log.Warn().Err(err).Msg("outbox relay: events left unpublished; the next start publishes them")
	}
	h.Bus.Close()
	if h.Store != nil {
		h.Store.Close()
	}
}

// OneShot drives runs of h outside a daemon (run, runs resume) as holder:
// with text, it tells on stderr when it waits for the device and, once the
// lease is held, says started. *begun turns true then: a failure before it
// is the command's own (in the agent error format), not the run's.
func (h *Host) OneShot(holder string, text bool, started string) (o service.OneShot, begun *bool) {
	begun = new(bool)
	return service.OneShot{Leases: h.Store, Runner: agent.GraphRunner{Engine: h.Engine, Graph: h.Graph},
		HostID: h.HostID, Identity: h.Reach, Holder: holder, LeaseTTL: 30 * time.Second,
		Waiting: func(err error) {
			if text {
				fmt.Fprintf(os.Stderr, "waiting for the device: %v\n", err)
			}
		},
		Started: func() {
			*begun = true
			if text {
				fmt.Fprintln(os.Stderr, started)
			}
		}}, begun
}

// Drive drives run to its end in this process under its device's lease as
// holder (run, runs resume; service.OneShot), then waits (10 s at most) for
// the relay to publish its events, so NATS has them when the process
// exits. With text, stderr tells when it waits for the device and says
// started once the lease is held. begun reports whether it was: an error
// before is the command's own (the agent error format), one after leaves
// the run resumable.
func (h *Host) Drive(ctx context.Context, run agent.Run, holder string, text bool, started string) (status agent.RunStatus, took time.Duration, begun bool, err error) {
	o, b := h.OneShot(holder, text, started)
	status, took, err = o.Run(ctx, run)
	if err != nil {
		return status, took, *b, err
	}
	// Wait for the running relay (Drain must not run beside it).
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := service.WaitPublished(dctx, h.Store, run.RunID, 0); err != nil {
		h.Config.Log.Warn().Err(err).Msg("events stay in the outbox; the next start publishes them")
	}
	return status, took, true, nil
}

// TextProgress is a HostConfig.Progress printing node progress lines on
// stderr when text (the CLI's text output), nothing otherwise.
func TextProgress(text bool) func(node, line string) {
	return func(node, line string) {
		if text {
			fmt.Fprintf(os.Stderr, "  %-15s %s\n", node, line)
		}
	}
}

// videoSettings is policy.VideoOf as evidence.Recorder reads it.
func videoSettings(pol agent.RetryPolicy) (evidence.VideoSettings, bool) {
	v, on := policy.VideoOf(pol)
	return evidence.VideoSettings{ShortSide: v.ShortSide, BitRate: v.BitRate, Segment: v.Segment.D(),
		MaxLength: v.MaxLength.D(), MaxBytes: v.MaxBytes}, on
}
