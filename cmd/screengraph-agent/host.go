package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
	"github.com/screengraph/screengraph-agent/device/artifacts"
	"github.com/screengraph/screengraph-agent/nodes"
	"github.com/screengraph/screengraph-agent/policy"
	"github.com/screengraph/screengraph-agent/snapshots"
)

// hostConfig is what a single host runs with: the embedded default store, an
// in-process NATS JetStream, the shared adb server and an Appium server.
type hostConfig struct {
	DataDir    string
	ADBServer  string // host:port
	AppiumURL  string // "" starts a local Appium
	PolicyFile string
	Log        zerolog.Logger
	// Progress sees node progress lines live; may be nil.
	Progress func(node, line string)
}

// host holds the running pieces; Close stops them in reverse order, after the
// relay has published what the runs committed.
type host struct {
	cfg      hostConfig
	store    *snapshots.Embedded
	policies *policy.Store
	nats     *server.Server
	nc       *nats.Conn
	pub      *snapshots.JetStreamPublisher
	relay    *snapshots.Relay
	relayErr chan error
	stopRly  context.CancelFunc
	adb      *adb.Client
	driver   *appium.Client
	engine   *agent.Engine
	graph    *agent.Graph
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

func openHost(ctx context.Context, cfg hostConfig) (h *host, err error) {
	h = &host{cfg: cfg, adb: adb.New(cfg.ADBServer)}
	defer func() {
		if err != nil {
			h.Close(context.Background())
		}
	}()
	if err := os.MkdirAll(filepath.Join(cfg.DataDir, "tmp"), 0o700); err != nil {
		return nil, err
	}
	if h.store, err = snapshots.OpenEmbedded(ctx, filepath.Join(cfg.DataDir, "agent.db"), snapshots.EmbeddedOptions{}); err != nil {
		return nil, fmt.Errorf("embedded store: %w", err)
	}
	if h.policies, err = policy.NewStore(ctx, h.store); err != nil {
		return nil, fmt.Errorf("policies: %w", err)
	}
	if cfg.PolicyFile != "" {
		p, err := policy.Load(cfg.PolicyFile)
		if err != nil {
			return nil, err
		}
		if old, err := h.policies.Get(p.PolicyVersion); err != nil || !samePolicy(old, p) {
			if err := h.policies.Add(ctx, p); err != nil {
				return nil, fmt.Errorf("policy %s: %w", cfg.PolicyFile, err)
			}
		}
		if err := h.policies.Switch(ctx, p.PolicyVersion); err != nil {
			return nil, err
		}
	}
	// The in-process NATS server keeps its JetStream files in the data dir, so
	// events committed but not yet published survive a restart (the outbox
	// holds them anyway).
	if h.nats, _, err = snapshots.StartEmbeddedNATSWith(snapshots.EmbeddedNATSOptions{Dir: filepath.Join(cfg.DataDir, "nats")}); err != nil {
		return nil, fmt.Errorf("embedded NATS: %w", err)
	}
	if h.nc, err = snapshots.ConnectNATS(h.nats.ClientURL()); err != nil {
		return nil, err
	}
	if h.pub, err = snapshots.NewJetStreamPublisher(ctx, h.nc); err != nil {
		return nil, err
	}
	h.relay = &snapshots.Relay{Store: h.store, Publisher: h.pub, Log: cfg.Log}
	rctx, cancel := context.WithCancel(context.Background())
	h.stopRly = cancel
	h.relayErr = make(chan error, 1)
	go func() { h.relayErr <- h.relay.Run(rctx) }()

	url := cfg.AppiumURL
	if url == "" {
		// A local Appium that outlives the run, so the next run reuses it and
		// its session (`screengraph-agent appium stop` ends it).
		if url, h.AppiumStart, err = localAppium(ctx, cfg.DataDir, adbPort(cfg.ADBServer)); err != nil {
			return nil, err
		}
	}
	if h.driver, err = appium.New(url, appium.Options{}); err != nil {
		return nil, err
	}
	fetcher, err := artifacts.New(artifacts.Options{CacheDir: filepath.Join(cfg.DataDir, "artifacts")})
	if err != nil {
		return nil, err
	}
	port := adbPort(cfg.ADBServer)
	h.graph, err = nodes.NewSetupGraph(nodes.SetupDeps{
		Ports: nodes.Ports{
			Driver:        h.driver,
			Resolve:       device.Resolver(h.adb),
			Emulators:     hostEmulators(cfg.DataDir, cfg.ADBServer),
			ADBServerPort: port,
			Capabilities: func(serial string, adbPort int) (map[string]any, error) {
				return appium.Capabilities(appium.CapsConfig{Serial: serial, ADBPort: adbPort})
			},
		},
		DeviceFor: func(serial string) device.Device { return device.NewADBDevice(h.adb, serial) },
		Sessions:  kvSessions{h.store},
		Provision: nodes.ProvisionDeps{Artifacts: fetcher, Verifications: kvVerifications{h.store},
			TempDir: filepath.Join(cfg.DataDir, "tmp")},
		Progress: cfg.Progress,
	})
	if err != nil {
		return nil, err
	}
	h.engine = &agent.Engine{Store: h.store, Policies: h.policies}
	return h, nil
}

func samePolicy(a, b *policy.Policy) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

// Close publishes what is left in the outbox (bounded), then stops the relay,
// NATS, Appium (when started here) and the store.
func (h *host) Close(ctx context.Context) {
	if h.relay != nil && h.store != nil {
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		h.relay.Drain(dctx)
		cancel()
	}
	if h.stopRly != nil {
		h.stopRly()
		<-h.relayErr
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

// kvSessions keeps the Appium session id per device serial in the store, so
// a restarted daemon reuses the session (EnsureDevice's REUSE_OR_CREATE).
type kvSessions struct{ st agent.Store }

func sessionKey(serial string) string { return "appium/session/" + serial }

func (k kvSessions) Get(ctx context.Context, serial string) (string, error) {
	b, err := k.st.GetKV(ctx, sessionKey(serial))
	if errors.Is(err, agent.ErrNotFound) {
		return "", nil
	}
	return string(b), err
}

func (k kvSessions) Put(ctx context.Context, serial, id string) error {
	return k.st.PutKV(ctx, sessionKey(serial), []byte(id))
}

func (k kvSessions) Forget(ctx context.Context, serial string) error {
	return k.st.PutKV(ctx, sessionKey(serial), nil)
}

// kvVerifications keeps the verified signer digests of installed builds.
type kvVerifications struct{ st agent.Store }

func verificationKey(k nodes.VerificationKey) string {
	b, _ := json.Marshal(k)
	return "provision/verified/" + string(b)
}

func (k kvVerifications) Get(ctx context.Context, key nodes.VerificationKey) ([]string, bool, error) {
	b, err := k.st.GetKV(ctx, verificationKey(key))
	if errors.Is(err, agent.ErrNotFound) || (err == nil && len(b) == 0) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	var signers []string
	if err := json.Unmarshal(b, &signers); err != nil {
		return nil, false, nil
	}
	return signers, true, nil
}

func (k kvVerifications) Put(ctx context.Context, key nodes.VerificationKey, signers []string) error {
	b, _ := json.Marshal(signers)
	return k.st.PutKV(ctx, verificationKey(key), b)
}
