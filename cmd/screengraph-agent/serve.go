package main

import (
	"context"
	"github.com/screengraph/screengraph-agent/cmd/internal/cli"
	"os"
	"time"

	"github.com/screengraph/screengraph-agent/agent/httpapi"
	agentd "github.com/screengraph/screengraph-agent/cmd/internal/daemon"
	"github.com/screengraph/screengraph-agent/cmd/internal/render"
)

// DefaultListen is where the daemon's HTTP API listens, and where the CLI's
// client commands look for it.
const DefaultListen = "127.0.0.1:7420"

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

// load merges serve's configuration (agentd.LoadConfig): its defaults of
// --listen and --adb-server, the --config file, SCREENGRAPH_* and the flags
// given.
func (c *serveCmd) load() (agentd.Config, error) {
	return agentd.LoadConfig(c.Config, map[string]any{"listen": DefaultListen, "adb-server": adbAddr("")}, c.serveFlagValues())
}

func (c *serveCmd) fail(err error) error {
	if c.Output == "json" {
		render.PrintJSON(httpapi.ErrorBody(err, ""))
	}
	return cli.ExitError{Code: 2, Err: err}
}

func (c *serveCmd) Run(ctx context.Context, g *Globals) error {
	cfg, err := c.load()
	if err != nil {
		return c.fail(err)
	}
	if c.PrintConfig {
		// What --config reads: the same keys, durations as "30s" (config.go).
		b, err := cfg.Marshal(c.Output)
		if err != nil {
			return c.fail(err)
		}
		_, err = os.Stdout.Write(b)
		return err
	}
	cfg.Log = g.logger()
	d, err := agentd.New(ctx, cfg)
	if err != nil {
		return c.fail(err)
	}
	if err := d.Run(ctx); err != nil {
		return c.fail(err)
	}
	return nil
}
