package main

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/screengraph/screengraph-agent/adb"
	"github.com/screengraph/screengraph-agent/agent"
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

// streamLimits are the AGENT_EVENTS stream's MaxAge and MaxBytes.
func (c hostConfig) streamLimits() (time.Duration, int64) {
	maxAge, maxBytes := c.StreamMaxAge, c.StreamMaxBytes
	if maxAge <= 0 {
		maxAge = natsbus.DefaultStreamMaxAge
	}
	if maxBytes <= 0 {
		maxBytes = natsbus.DefaultStreamMaxBytes
	}
	return maxAge, maxBytes
}

// hostStore is what the host needs of a store: runs, events, outbox and
// device leases (sqlite.Embedded on one host, postgres.Postgres in a
// fleet).
type hostStore interface {
	agent.Store
	agent.Leases
	agent.ParkedLister
	snapshots.OutboxCounter
	agent.Pruner
	agent.ArtifactIndex
}

// host holds the running pieces; Close stops them in reverse order, after the
// relay has published what the runs committed.
type host struct {
	cfg      hostConfig
	store    hostStore
	policies *policy.Store
	nats     *server.Server
	nc       *nats.Conn
	pub      agent.Publisher
	relay    *relay.Relay
	relayErr chan error
	stopRly  context.CancelFunc
	adb      *adb.Client
	// hostID identifies the adb server's machine (device.HostID): device
	// leases are keyed agent.DeviceKey(hostID, serial).
	hostID string
	driver *appium.Client
	engine *agent.Engine
	graph  *agent.Graph
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
	if err := os.MkdirAll(filepath.Join(cfg.DataDir, "tmp"), 0o700); err != nil {
		return agent.Wrap(agent.ErrInvalidRequest, err, "data dir %s", cfg.DataDir)
	}
	// The data dir holds the store (run requests with their references),
	// tokens' hashes and tenants' artifacts: owner only, even when an older
	// version created it 0755.
	if err := os.Chmod(cfg.DataDir, 0o700); err != nil {
		return agent.Wrap(agent.ErrInvalidRequest, err, "data dir %s", cfg.DataDir)
	}
	if h.hostID, err = device.HostID(ctx, cfg.ADBServer); err != nil {
		return agent.Wrap(agent.ErrInvalidRequest, err, "identifying the adb server's machine")
	}
	if cfg.DatabaseURL != "" {
		// Migrates under goose's advisory lock: daemons starting together
		// migrate once.
		pg, err := postgres.OpenPostgres(ctx, cfg.DatabaseURL, postgres.PostgresOptions{Log: cfg.Log})
		if err != nil {
			return agent.Wrap(agent.ErrNetwork, err, "Postgres %s", agent.RedactString(cfg.DatabaseURL))
		}
		h.store = pg
	} else {
		emb, err := sqlite.OpenEmbedded(ctx, filepath.Join(cfg.DataDir, "agent.db"), sqlite.EmbeddedOptions{})
		if err != nil {
			return agent.Wrap(agent.ErrProcess, err, "embedded store")
		}
		h.store = emb
	}
	if h.policies, err = policy.NewStore(ctx, h.store); err != nil {
		return agent.Wrap(agent.ErrProcess, err, "policies")
	}
	files := cfg.PolicyFiles
	if cfg.PolicyFile != "" {
		files = append(files, cfg.PolicyFile)
	}
	for i, f := range files {
		p, err := policy.Load(f)
		if err != nil {
			return agent.Wrap(agent.ErrInvalidRequest, err, "policy %s", f)
		}
		if old, err := h.policies.Get(p.PolicyVersion); err != nil || !samePolicy(old, p) {
			if err := h.policies.Add(ctx, p); err != nil {
				return agent.Wrap(agent.ErrInvalidRequest, err, "policy %s", f)
			}
		}
		// run --policy runs under its policy; serve's first --policy becomes current.
		if (cfg.PolicyFile != "" && f == cfg.PolicyFile) || (cfg.PolicyFile == "" && i == 0) {
			if err := h.policies.Switch(ctx, p.PolicyVersion); err != nil {
				return agent.Wrap(agent.ErrInvalidRequest, err, "policy %s", f)
			}
		}
	}
	var natsAuth []nats.Option // the daemon's own NATS credentials (tenancy)
	if cfg.NATSURL != "" {
		h.NATSClientURL = cfg.NATSURL
	} else {
		// The in-process NATS server keeps its JetStream files in the data
		// dir, so events published survive a restart (the outbox holds the
		// unpublished ones anyway).
		o := natsbus.EmbeddedNATSOptions{Dir: filepath.Join(cfg.DataDir, "nats")}
		if cfg.NATSListen != "" {
			host, port, err := net.SplitHostPort(cfg.NATSListen)
			if err != nil {
				return agent.Wrap(agent.ErrInvalidRequest, err, "--nats-listen %q", cfg.NATSListen)
			}
			o.Host = host
			if o.Port, err = strconv.Atoi(port); err != nil {
				return agent.Wrap(agent.ErrInvalidRequest, err, "--nats-listen %q", cfg.NATSListen)
			}
		}
		if cfg.NATSTokens {
			if o.Auth, natsAuth, err = natsbus.TokenAuth(h.store, cfg.NATSLog); err != nil {
				return err
			}
		}
		if h.nats, h.NATSClientURL, err = natsbus.StartEmbeddedNATSWith(o); err != nil {
			return agent.Wrap(agent.ErrProcess, err, "embedded NATS on %s", cfg.NATSListen)
		}
	}
	if cfg.NATSURL == "" {
		if h.nc, err = natsbus.ConnectNATS(h.NATSClientURL, natsAuth...); err != nil {
			return agent.Wrap(agent.ErrNetwork, err, "NATS %s", agent.RedactString(h.NATSClientURL))
		}
		if h.pub, err = natsbus.NewJetStreamPublisher(ctx, h.nc, natsbus.WithStreamLimits(cfg.streamLimits())); err != nil {
			return agent.Wrap(agent.ErrNetwork, err, "NATS JetStream")
		}
	} else {
		// An external NATS (a fleet's cluster) may be down while the daemon
		// starts: runs go on, their events wait in the outbox, and the relay
		// publishes once the cluster answers.
		if h.nc, err = natsbus.ConnectNATS(h.NATSClientURL, nats.RetryOnFailedConnect(true)); err != nil {
			return agent.Wrap(agent.ErrNetwork, err, "NATS %s", agent.RedactString(h.NATSClientURL))
		}
		maxAge, maxBytes := cfg.streamLimits()
		lp := natsbus.NewLazyPublisher(h.nc, natsbus.StreamConfigLimited(max(cfg.NATSReplicas, 1), maxAge, maxBytes))
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if err := lp.Ready(rctx); err != nil {
			cfg.Log.Warn().Err(err).Str("nats", agent.RedactString(h.NATSClientURL)).Msg("NATS JetStream not ready; events wait in the outbox until it is")
		}
		cancel()
		h.pub = lp
	}
	// Runs publish side by side (each strictly in order): a daemon drives
	// up to one run per device, and 4 at a time left 32 devices queueing.
	h.relay = &relay.Relay{Store: h.store, Publisher: h.pub, Log: cfg.Log, Concurrency: 64}
	rctx, cancel := context.WithCancel(context.Background())
	h.stopRly = cancel
	h.relayErr = make(chan error, 1)
	go func() { h.relayErr <- h.relay.Run(rctx) }()

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
	h.graph, err = nodes.NewSetupGraph(nodes.SetupDeps{
		Ports: nodes.Ports{
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
		Provision: nodes.ProvisionDeps{Artifacts: fetcher, Verifications: nodes.StoreVerifications{KV: h.store},
			TempDir: filepath.Join(cfg.DataDir, "tmp")},
		Progress: cfg.Progress,
	})
	if err != nil {
		return agent.Wrap(agent.ErrInternal, err, "setup graph")
	}
	if h.blobs, err = openBlobs(ctx, cfg); err != nil {
		return err
	}
	h.engine = &agent.Engine{Store: h.store, Policies: h.policies, Evidence: &evidence.Capturer{
		Blobs:     h.blobs,
		DeviceFor: func(serial string) device.Device { return adbdevice.NewADBDevice(h.adb, serial) },
		Driver:    h.driver,
		Kinds:     policy.EvidenceKinds,
		Logf:      func(format string, args ...any) { cfg.Log.Warn().Msgf(format, args...) },
	}}
	return nil
}

// openBlobs opens the evidence blob store of cfg: the data dir's, or the
// bucket of --artifact-store.
func openBlobs(ctx context.Context, cfg hostConfig) (agent.BlobStore, error) {
	if cfg.ArtifactStore == "" {
		return blobs.NewDir(filepath.Join(cfg.DataDir, "evidence"))
	}
	return blobs.NewS3(ctx, cfg.ArtifactStore, blobs.S3Options{Endpoint: cfg.ArtifactStoreEndpoint})
}

func samePolicy(a, b *policy.Policy) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

// Close stops the relay, then publishes what is left in the outbox (bounded:
// Drain runs only once Run has returned), then stops NATS and the store.
// It is safe on a partly opened host.
func (h *host) Close(ctx context.Context) {
	if h == nil {
		return
	}
	if h.stopRly != nil {
		h.stopRly()
		<-h.relayErr
		h.stopRly = nil
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if _, err := h.relay.Drain(dctx); err != nil {
			h.cfg.Log.Warn().Err(err).Msg("outbox relay: events left unpublished; the next start publishes them")
		}
		cancel()
	}
	if h.nc != nil {
		h.nc.Close()
	}
	if h.nats != nil {
		h.nats.Shutdown()
		h.nats.WaitForShutdown()
	}
	if h.store != nil {
		h.store.Close()
	}
}
