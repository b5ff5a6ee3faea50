package daemon

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/confmap"
	"github.com/knadh/koanf/providers/env/v2"
	koanffile "github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/v2"
	"github.com/rs/zerolog"
	yamlv3 "gopkg.in/yaml.v3"

	"github.com/screengraph/screengraph-agent/agent"
	"github.com/screengraph/screengraph-agent/agent/httpapi"
	"github.com/screengraph/screengraph-agent/agent/retention"
	"github.com/screengraph/screengraph-agent/device/artifacts"
	"github.com/screengraph/screengraph-agent/snapshots/natsbus"
	"github.com/screengraph/screengraph-agent/snapshots/postgres"
	"github.com/screengraph/screengraph-agent/snapshots/sqlite"
)

// Config is what a daemon (`serve`) runs with: the keys of its config file
// (serve's flag names, koanf tags), merged by LoadConfig from (lowest
// first) defaults, the config file (YAML or JSON), SCREENGRAPH_* environment
// variables (SCREENGRAPH_DATA_DIR -> data-dir) and the flags given; then the
// logger and readiness hook the process passes.
type Config struct {
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
	// Log is the daemon's one logger.
	Log zerolog.Logger `koanf:"-" json:"-"`
	// Ready, when set, is called once the API listens and runs resume (after
	// systemd was told READY=1).
	Ready func() `koanf:"-" json:"-"`
}

// Artifacts is the fetcher configuration of cfg.
func (cfg Config) Artifacts() artifacts.Config {
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

// LoadConfig merges a daemon's configuration with koanf, lowest first:
// the daemon's defaults, then defaults (the caller's: listen, adb-server),
// the config file at file ("" for none; YAML or JSON; a key that is not a
// config key is an invalid_request_error naming the closest one), the
// SCREENGRAPH_* environment (lists comma-separated) and flags (keyed by
// config key); then checks the values (Check). Errors are agent errors
// (invalid_request_error) naming the key and where it came from.
func LoadConfig(file string, defaults, flags map[string]any) (Config, error) {
	k := koanf.New(".")
	base := map[string]any{
		"nats-listen": "127.0.0.1:4222", "tenant": "local", "lease-ttl": "30s", "pending-timeout": "10m", "nats-replicas": 1,
		"retention": retention.DefaultRetention.String(), "stream-max-bytes": natsbus.DefaultStreamMaxBytes,
		// What the daemon uses when these are not set, so --print-config
		// shows the real values (artifacts.Options' zero values mean them).
		"artifact-idle-timeout": artifacts.DefaultIdleTimeout.String(),
		"artifact-max-bytes":    strconv.FormatInt(artifacts.DefaultMaxBytes, 10),
	}
	for key, v := range defaults {
		base[key] = v
	}
	if err := k.Load(confmap.Provider(base, "."), nil); err != nil {
		return Config{}, err
	}
	if file != "" {
		// Read apart first: a key that is not a flag name (a typo, the
		// camelCase of an older --print-config) is refused, not ignored.
		fk := koanf.New(".")
		if err := fk.Load(koanffile.Provider(file), yaml.Parser()); err != nil {
			return Config{}, agent.Wrap(agent.ErrInvalidRequest, err, "--config %s", file)
		}
		if err := checkConfigKeys(fk.Raw(), "--config "+file); err != nil {
			return Config{}, err
		}
		if err := k.Merge(fk); err != nil {
			return Config{}, err
		}
	}
	known := ConfigKeys()
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
		return Config{}, err
	}
	if err := k.Load(confmap.Provider(flags, "."), nil); err != nil {
		return Config{}, err
	}
	var cfg Config
	if err := k.UnmarshalWithConf("", &cfg, koanf.UnmarshalConf{Tag: "koanf"}); err != nil {
		return Config{}, agent.Wrap(agent.ErrInvalidRequest, err, "configuration")
	}
	if cfg.DataDir == "" {
		d, err := sqlite.DataDir()
		if err != nil {
			return cfg, err
		}
		cfg.DataDir = d
	}
	return cfg, cfg.Check()
}

// Check refuses values a daemon cannot run with: durations and counts out
// of range, an invalid tenant id, allowed-host names or connection string;
// an invalid_request_error naming the key.
func (cfg Config) Check() error {
	if cfg.LeaseTTL <= 0 {
		return agent.Errorf(agent.ErrInvalidRequest, "lease-ttl must be > 0")
	}
	if cfg.PendingTimeout <= 0 || cfg.MaxPendingPerTenant < 0 {
		return agent.Errorf(agent.ErrInvalidRequest, "pending-timeout must be > 0 and max-pending-per-tenant >= 0")
	}
	// The default tenant is a NATS subject token and a scope as is: the one
	// rule of tenant ids (agent.ValidTenantID), whichever source set it.
	// Empty is the service's default (local).
	if cfg.Tenant != "" && !agent.ValidTenantID(cfg.Tenant) {
		return agent.InvalidTenantID("tenant (--tenant, config key tenant, SCREENGRAPH_TENANT)", cfg.Tenant)
	}
	if cfg.Retention < time.Hour {
		return agent.Errorf(agent.ErrInvalidRequest, "retention must be at least 1h, not %v", cfg.Retention)
	}
	if cfg.StreamMaxBytes < 1<<20 {
		return agent.Errorf(agent.ErrInvalidRequest, "stream-max-bytes must be at least 1 MiB (1048576), not %d", cfg.StreamMaxBytes)
	}
	if cfg.NATSReplicas < 1 || cfg.NATSReplicas > 5 {
		return agent.Errorf(agent.ErrInvalidRequest, "nats-replicas must be 1 to 5, not %d", cfg.NATSReplicas)
	}
	if len(cfg.AllowedHosts) > httpapi.MaxAllowedHosts {
		return agent.Errorf(agent.ErrInvalidRequest, "allowed-host: at most %d names, not %d", httpapi.MaxAllowedHosts, len(cfg.AllowedHosts))
	}
	for _, h := range cfg.AllowedHosts {
		if err := httpapi.CheckAllowedHost(h); err != nil {
			return err
		}
	}
	// Both of libpq's forms (a URL, keyword/value pairs), as pgx reads them.
	if cfg.DatabaseURL != "" {
		if err := postgres.CheckConnString(cfg.DatabaseURL); err != nil {
			return err
		}
	}
	return nil
}

// ConfigKeys are the keys of a config file: those of Config (its koanf tags), in field order.
func ConfigKeys() []string {
	t := reflect.TypeOf(Config{})
	keys := make([]string, 0, t.NumField())
	for i := 0; i < t.NumField(); i++ {
		if k := t.Field(i).Tag.Get("koanf"); k != "" && k != "-" {
			keys = append(keys, k)
		}
	}
	return keys
}

// checkConfigKeys refuses a config file's keys that are not serve's: the
// error names the key and the closest known one.
func checkConfigKeys(raw map[string]any, source string) error {
	known := ConfigKeys()
	var unknown []string
	for k := range raw {
		if !slices.Contains(known, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	slices.Sort(unknown)
	msgs := make([]string, 0, len(unknown))
	for _, k := range unknown {
		m := fmt.Sprintf("unknown key %q", k)
		if c := closest(k, known); c != "" {
			m += fmt.Sprintf(" (did you mean %q?)", c)
		}
		msgs = append(msgs, m)
	}
	return agent.Errorf(agent.ErrInvalidRequest, "%s: %s; the keys are serve's flag names: %s",
		source, strings.Join(msgs, ", "), strings.Join(known, ", "))
}

// closest is the known name nearest to k (edit distance after lower-casing
// and dropping - and _), or "" when none is near (more than half of k).
func closest(k string, known []string) string {
	norm := func(s string) string {
		return strings.NewReplacer("-", "", "_", "").Replace(strings.ToLower(s))
	}
	best, bestD := "", len(k)/2+1
	for _, c := range known {
		if d := editDistance(norm(k), norm(c)); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// configMap is cfg keyed as --config reads it, durations as "30s", secrets
// redacted (agent.RedactJSON: a URL's userinfo becomes <REDACTED>, so a
// printed database-url with credentials is not read back as it was; give the
// password through PGPASSWORD or a service file instead).
func configMap(cfg Config) (map[string]any, error) {
	// The connection string by pgx's parser too (either of libpq's forms).
	cfg.DatabaseURL = postgres.RedactConnString(cfg.DatabaseURL)
	m := map[string]any{}
	v := reflect.ValueOf(cfg)
	for i := 0; i < v.NumField(); i++ {
		k := v.Type().Field(i).Tag.Get("koanf")
		if k == "" || k == "-" {
			continue
		}
		fv := v.Field(i).Interface()
		if v.Field(i).Kind() == reflect.Slice && v.Field(i).IsNil() {
			fv = []any{} // an empty list, not null
		}
		if d, ok := fv.(time.Duration); ok {
			fv = d.String()
		}
		m[k] = fv
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	out := map[string]any{}
	d := json.NewDecoder(bytes.NewReader(agent.RedactJSON(b)))
	d.UseNumber() // 536870912 stays an integer, not 5.36870912e+08
	if err := d.Decode(&out); err != nil {
		return nil, err
	}
	for k, v := range out {
		if n, ok := v.(json.Number); ok {
			if i, err := n.Int64(); err == nil {
				out[k] = i
			} else if f, err := n.Float64(); err == nil {
				out[k] = f
			}
		}
	}
	return out, nil
}

// Marshal renders cfg as --config reads it (--print-config): YAML, or JSON
// when format is "json"; secrets redacted (configMap).
func (cfg Config) Marshal(format string) ([]byte, error) {
	m, err := configMap(cfg)
	if err != nil {
		return nil, err
	}
	if format == "json" {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false) // <REDACTED> as written
		enc.SetIndent("", "  ")
		err := enc.Encode(m)
		return b.Bytes(), err
	}
	return yamlv3.Marshal(m)
}
