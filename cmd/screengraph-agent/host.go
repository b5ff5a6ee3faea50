package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
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

// hostConfig is what a single host runs with: the embedded default store, a
// NATS JetStream (in-process, or an external server), the shared adb server
// and an Appium server.
type hostConfig struct {
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
	Log        zerolog.Logger
	// Progress sees node progress lines live; may be nil.
	Progress func(node, line string)
	// NATSTokens (serve) makes the embedded NATS server authenticate its
	// clients against the store's API tokens (natsbus.TokenAuth); NATSLog
	// reports the connections it refuses (may be nil).
	NATSTokens bool
	NATSLog    func(format string, args ...any)
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

// hostStore is what the host needs of a store: runs, events, outbox and
// device leases (sqlite.Store on one host, postgres.Store in a
// fleet).
type hostStore interface {
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

// host holds the running pieces; Close stops them in reverse order, after the
// relay has published what the runs committed.
type host struct {
	cfg      hostConfig
	store    hostStore
	policies *policy.Store
	// bus is the NATS side (in-process server, connection, publisher);
	// nc its connection.
	bus     *natsbus.Bus
	nc      *nats.Conn
	relay   *relay.Relay
	relayBg *relay.Background
	adb     *adb.Client
	// hostID identifies the adb server's machine (device.HostID): the
	// leases of AVDs this host boots are keyed agent.DeviceKey(hostID,
	// AVD name). reach lists the devices and reads their identities
	// (service.Keys): a connected device's lease is keyed by what the
	// device says of itself, whichever host or daemon asks.
	hostID string
	reach  *adbdevice.Reachable
	driver *appium.Client
	engine *agent.Engine
	graph  *agent.Graph
	// setup is what graph was built from.
	setup nodes.SetupDeps
	// blobs keeps the evidence artifacts' bytes (the rows are the store's).
	blobs agent.BlobStore
	// artifacts is the fetcher ProvisionApp uses (serve checks
	// references with it at submission).
	artifacts *artifacts.Fetcher
	// NATSClientURL is where the events are published (nats://host:port).
	NATSClientURL string
	// AppiumURL is the Appium server the driver talks to.
	AppiumURL string
	// AppiumStart is how long starting the local Appium server took (0 when
	// one was reused or an external one was given).
	AppiumStart time.Duration
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
func openHost(ctx context.Context, cfg hostConfig) (*host, error) {
	h := &host{cfg: cfg, adb: adb.New(cfg.ADBServer)}
	if err := h.open(ctx); err != nil {
		// h is the partly opened host (never nil here): Close stops what
		// open started.
		h.Close(context.Background())
		return nil, err
	}
	return h, nil
}

func (h *host) open(ctx context.Context) (err error) {
	cfg := h.cfg
	if err := sqlite.PrepareDataDir(cfg.DataDir); err != nil {
		return err
	}
	if h.hostID, err = device.HostID(ctx, cfg.ADBServer); err != nil {
		return agent.Wrap(agent.ErrInvalidRequest, err, "identifying the adb server's machine")
	}
	h.reach = adbdevice.NewReachable(h.adb, emulator.ForDataDir(cfg.DataDir, cfg.ADBServer, nil).ListAVDs)
	if cfg.DatabaseURL != "" {
		// Migrates under goose's advisory lock: daemons starting together
		// migrate once.
		pg, err := postgres.Open(ctx, cfg.DatabaseURL, postgres.Options{Log: cfg.Log})
		if err != nil {
			return agent.Wrap(agent.ErrNetwork, err, "Postgres %s", postgres.RedactConnString(cfg.DatabaseURL))
		}
		h.store = pg
	} else {
		emb, err := sqlite.Open(ctx, filepath.Join(cfg.DataDir, "agent.db"), sqlite.Options{})
		if err != nil {
			return agent.Wrap(agent.ErrProcess, err, "embedded store")
		}
		h.store = emb
	}
	if h.policies, err = policy.NewStore(ctx, h.store); err != nil {
		return agent.Wrap(agent.ErrProcess, err, "policies")
	}
	// run --policy runs under its policy; serve's first --policy becomes current.
	files := cfg.PolicyFiles
	if cfg.PolicyFile != "" {
		files = append(files, cfg.PolicyFile)
	}
	if err := h.policies.AddFiles(ctx, files, cfg.PolicyFile); err != nil {
		return err
	}
	bc := natsbus.BusConfig{URL: cfg.NATSURL, Listen: cfg.NATSListen, Dir: filepath.Join(cfg.DataDir, "nats"),
		Replicas: cfg.NATSReplicas, MaxAge: cfg.StreamMaxAge, MaxBytes: cfg.StreamMaxBytes,
		NotReady: func(err error) {
			cfg.Log.Warn().Err(err).Str("nats", agent.RedactString(cfg.NATSURL)).Msg("NATS JetStream not ready; events wait in the outbox until it is")
		}}
	bc.MaxConns = cfg.NATSMaxConns
	if cfg.NATSTokens {
		bc.Tokens, bc.TokenLog = h.store, cfg.NATSLog
	}
	if h.bus, err = natsbus.OpenBus(ctx, bc); err != nil {
		return err
	}
	h.nc, h.NATSClientURL = h.bus.Conn, h.bus.ClientURL
	// Runs publish side by side (each strictly in order): a daemon drives
	// up to one run per device, and 4 at a time left 32 devices queueing.
	h.relay = &relay.Relay{Store: h.store, Publisher: h.bus.Publisher, Log: cfg.Log, Concurrency: 64}
	h.relayBg = relay.Start(h.relay)

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
	if h.driver, err = appium.New(url, appium.Options{}); err != nil {
		return agent.Wrap(agent.ErrInvalidRequest, err, "--appium")
	}
	aopt := artifacts.Options{CacheDir: filepath.Join(cfg.DataDir, "artifacts")}
	if cfg.Artifacts != nil {
		var tenanted func(context.Context) (bool, error)
		if ts, ok := h.store.(agent.Tokens); ok {
			tenanted = ts.HasTokens
		}
		if aopt, err = cfg.Artifacts.DaemonOptions(aopt.CacheDir, tenanted); err != nil {
			return err
		}
	}
	fetcher, err := artifacts.New(aopt)
	if err != nil {
		var ae *agent.Error
		if errors.As(err, &ae) {
			return err
		}
		return agent.Wrap(agent.ErrProcess, err, "artifact cache")
	}
	h.artifacts = fetcher
	port := adbPort(cfg.ADBServer)
	// WaitIdle's idle screen goes to the success evidence (evidence.IdleScreens).
	idle := &evidence.IdleScreens{}
	h.setup = nodes.SetupDeps{
		Ports: nodes.Ports{
			IdleScreens:   idle,
			Driver:        h.driver,
			Resolve:       adbdevice.NewResolver(h.adb, adbdevice.ReconnectGrace),
			Emulators:     emulator.ForDataDir(cfg.DataDir, cfg.ADBServer, nil),
			ADBServerPort: port,
			Capabilities: func(serial string, adbPort int) (map[string]any, error) {
				return appium.Capabilities(appium.CapsConfig{Serial: serial, ADBPort: adbPort})
			},
		},
		DeviceFor: func(serial string) device.Device { return adbdevice.NewADBDevice(h.adb, serial) },
		Sessions:  nodes.StoreSessions{KV: h.store, Server: url},
		Provision: nodes.ProvisionDeps{Artifacts: fetcher, Verifications: &nodes.StoreVerifications{KV: h.store},
			TempDir: filepath.Join(cfg.DataDir, "tmp")},
		Progress: cfg.Progress,
	}
	h.graph, err = nodes.NewSetupGraph(h.setup)
	if err != nil {
		return agent.Wrap(agent.ErrInternal, err, "setup graph")
	}
	if h.blobs, err = blobs.Open(ctx, filepath.Join(cfg.DataDir, "evidence"), cfg.ArtifactStore, cfg.ArtifactStoreEndpoint); err != nil {
		return err
	}
	recorder := &evidence.Recorder{
		DeviceFor: func(serial string) device.Device { return adbdevice.NewADBDevice(h.adb, serial) },
		Settings:  videoSettings, FirstNode: policy.NodeLaunchOrAttach,
		Logf: func(format string, args ...any) { cfg.Log.Warn().Msgf(format, args...) },
	}
	h.engine = &agent.Engine{Store: h.store, Policies: h.policies, Recorder: recorder, Evidence: &evidence.Capturer{
		Video:     recorder,
		Blobs:     h.blobs,
		DeviceFor: func(serial string) device.Device { return adbdevice.NewADBDevice(h.adb, serial) },
		Driver:    h.driver,
		Kinds:     policy.EvidenceKinds,
		Logf:      func(format string, args ...any) { cfg.Log.Warn().Msgf(format, args...) },
		Idle:      idle,
	}, Handover: &evidence.Handover{
		Leases: h.store,
		Runs:   h.store,
		KV:     h.store,
		DeviceFor: func(serial string) device.Device {
			return adbdevice.NewADBDevice(h.adb, serial).WithReconnectGrace(0)
		},
		Logf: func(format string, args ...any) { cfg.Log.Warn().Msgf(format, args...) },
	}}
	return nil
}

// Close stops the relay, then publishes what is left in the outbox (bounded:
// Drain runs only once Run has returned), then stops NATS and the store.
// It is safe on a partly opened host.
func (h *host) Close(ctx context.Context) {
	if h == nil {
		return
	}
	if err := h.relayBg.Stop(ctx, 10*time.Second); err != nil {
		h.cfg.Log.Warn().Err(err).Msg("outbox relay: events left unpublished; the next start publishes them")
	}
	h.bus.Close()
	if h.store != nil {
		h.store.Close()
	}
}

// oneShot drives runs of h outside a daemon (run, runs resume) as holder:
// with text, it tells on stderr when it waits for the device and, once the
// lease is held, says started. *begun turns true then: a failure before it
// is the command's own (in the agent error format), not the run's.
func (h *host) oneShot(holder string, text bool, started string) (o service.OneShot, begun *bool) {
	begun = new(bool)
	return service.OneShot{Leases: h.store, Runner: agent.GraphRunner{Engine: h.engine, Graph: h.graph},
		HostID: h.hostID, Identity: h.reach, Holder: holder, LeaseTTL: 30 * time.Second,
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

// videoSettings is policy.VideoOf as evidence.Recorder reads it.
func videoSettings(pol agent.RetryPolicy) (evidence.VideoSettings, bool) {
	v, on := policy.VideoOf(pol)
	return evidence.VideoSettings{ShortSide: v.ShortSide, BitRate: v.BitRate, Segment: v.Segment.D(),
		MaxLength: v.MaxLength.D(), MaxBytes: v.MaxBytes}, on
}
