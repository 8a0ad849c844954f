package nas

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/chronoscron/chronos/internal/envconfig"
	"github.com/chronoscron/chronos/internal/secretfile"
	"github.com/chronoscron/chronos/relay/cronkey"
)

// Environment variables of NAS. Every config key has its own,
// EnvPrefix + the key in upper case with dots turned into underscores.
const (
	// EnvPrefix prefixes every NAS setting in the environment.
	EnvPrefix = "CHRONOS_NAS_"
	// EnvConfigFile names the config file when no path is given.
	EnvConfigFile = EnvPrefix + "CONFIG"
	// EnvURL is the base URL the dead-letter commands call.
	EnvURL = EnvPrefix + "URL"
)

// redactedValue stands for a secret in Redacted.
const redactedValue = "<redacted>"

// CheckEnv reports every CHRONOS_NAS_ variable of environ (NAME=value pairs,
// as os.Environ returns them) that names no config key, so that a misspelt
// variable does not silently leave a setting at its default.
func CheckEnv(environ []string) error {
	var errs []error
	for _, name := range envconfig.Unknown(&Config{}, EnvPrefix, environ, EnvConfigFile, EnvURL) {
		errs = append(errs, fmt.Errorf("config: environment variable %s names no config key (see chronos nas --help)", name))
	}
	return errors.Join(errs...)
}

// LoadConfig reads the YAML file at path ("" reads none), then the
// environment through lookup (CHRONOS_NAS_<KEY>), then the secrets the
// *_file keys name, and returns the config with defaults applied and
// validated. The file is strict (an unknown key is an error) and a single
// value written for a list key is a one-element list. A relative path in the
// file is relative to the file's directory; one from the environment, to the
// working directory. A secret given both itself and as its *_file key is an
// error.
func LoadConfig(path string, lookup func(string) (string, bool)) (Config, error) {
	var cfg Config
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return Config{}, fmt.Errorf("config: %w", err)
		}
		if cfg, err = parseConfigFile(data); err != nil {
			return Config{}, fmt.Errorf("config %s: %w", path, err)
		}
		if err := refuseZeros(data); err != nil {
			return Config{}, fmt.Errorf("config %s: %w", path, err)
		}
		cfg.resolvePaths(filepath.Dir(path))
	}
	if err := envconfig.Apply(&cfg, EnvPrefix, lookup); err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	if err := refuseZeroEnv(lookup); err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	if err := cfg.readSecretFiles(); err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	if err := cfg.loadCronKeySealer(); err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	return cfg, nil
}

// parseConfigFile decodes a config file strictly. A single value for a list
// key is read as a one-element list, as the environment reads it; any other
// error is reported against the file as written.
func parseConfigFile(data []byte) (Config, error) {
	var cfg Config
	err := decodeStrict(data, &cfg)
	if err == nil {
		return cfg, nil
	}
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) != nil || !listsFromScalars(&doc) {
		return Config{}, err
	}
	fixed, merr := yaml.Marshal(&doc)
	cfg = Config{}
	if merr != nil || decodeStrict(fixed, &cfg) != nil {
		return Config{}, err
	}
	return cfg, nil
}

// decodeStrict decodes YAML into cfg: unknown keys are errors, an empty
// document is no keys.
func decodeStrict(data []byte, cfg *Config) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(cfg); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}

// listsFromScalars turns each single value written for a list key
// (relay.secrets: whsec_…) into a one-element list and reports whether it
// changed anything.
func listsFromScalars(doc *yaml.Node) bool {
	lists := map[string]bool{}
	for _, f := range envconfig.Fields(&Config{}, EnvPrefix) {
		if f.Value.Kind() == reflect.Slice {
			lists[f.Key] = true
		}
	}
	changed := false
	var walk func(n *yaml.Node, prefix string)
	walk = func(n *yaml.Node, prefix string) {
		if n.Kind == yaml.DocumentNode {
			for _, c := range n.Content {
				walk(c, prefix)
			}
			return
		}
		if n.Kind != yaml.MappingNode {
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			key := prefix + k.Value
			switch {
			case v.Kind == yaml.MappingNode:
				walk(v, key+".")
			case lists[key] && v.Kind == yaml.ScalarNode && v.Tag != "!!null":
				item := *v
				*v = yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Style: yaml.FlowStyle, Content: []*yaml.Node{&item}}
				changed = true
			}
		}
	}
	walk(doc, "")
	return changed
}

// resolvePaths makes the relative file paths of a config file relative to
// the file's directory dir, so that a config works from any working
// directory.
func (c *Config) resolvePaths(dir string) {
	for _, p := range []*string{&c.AgentsFile, &c.SigningKeysDir, &c.Relay.SecretsFile, &c.OperatorTokenFile, &c.StoreFile, &c.Relay.CronKeyEncryptionKeyFile} {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
	}
}

// readSecretFiles reads each secret its *_file key names, noting each file
// its group or others may read (see ExposedSecretFiles). A bearer token
// never has surrounding white space: a stray newline in a variable or a file
// must not lock the operator out.
func (c *Config) readSecretFiles() error {
	c.OperatorToken = strings.TrimSpace(c.OperatorToken)
	c.exposed = nil
	var errs []error
	if err := c.readSecretFile(&c.OperatorToken, c.OperatorTokenFile, "operator_token"); err != nil {
		errs = append(errs, err)
	}
	if err := c.readSecretFile(&c.Store, c.StoreFile, "store"); err != nil {
		errs = append(errs, err)
	}
	if err := c.readSecretListFile(&c.Relay.Secrets, c.Relay.SecretsFile, "relay.secrets"); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// loadCronKeySealer reads relay.cron_key_encryption_key_file, when set
// (cronkey.LoadSealer: a file its group or others may read is refused).
func (c *Config) loadCronKeySealer() error {
	c.sealer = nil
	if c.Relay.CronKeyEncryptionKeyFile == "" {
		return nil
	}
	s, err := cronkey.LoadSealer(c.Relay.CronKeyEncryptionKeyFile)
	if err != nil {
		return fmt.Errorf("relay.cron_key_encryption_key_file: %w", err)
	}
	c.sealer = s
	return nil
}

// CronKeySealer returns the sealer of the cron keys of direct delivery,
// under relay.cron_key_encryption_key_file: the one LoadConfig loaded, or,
// for a Config built in code, the file read now. It returns nil without an
// error when the key is not configured (no agent may use direct delivery
// then). Every dispatcher that delivers direct fires opens their keys with
// it.
func (c Config) CronKeySealer() (*cronkey.Sealer, error) {
	if c.sealer != nil || c.Relay.CronKeyEncryptionKeyFile == "" {
		return c.sealer, nil
	}
	if err := c.loadCronKeySealer(); err != nil {
		return nil, err
	}
	return c.sealer, nil
}

// ExposedSecretFiles returns the secret files (operator_token_file,
// store_file, relay.secrets_file) that LoadConfig read although their group
// or others may read them; NAS logs a warning for each when it starts.
func (c Config) ExposedSecretFiles() []secretfile.Exposure {
	return slices.Clone(c.exposed)
}

// readSecret reads the secret file named by key's *_file key, noting it
// when it is exposed.
func (c *Config) readSecret(file, key string) ([]byte, error) {
	data, e, err := secretfile.Read(file)
	if err != nil {
		return nil, fmt.Errorf("%s_file: %w", key, err)
	}
	if e != nil {
		c.exposed = append(c.exposed, *e)
	}
	return data, nil
}

// readSecretFile sets *dst to the trimmed content of file, unless file is
// empty. Both set, a missing file and an empty one are errors naming key.
func (c *Config) readSecretFile(dst *string, file, key string) error {
	if file == "" {
		return nil
	}
	if *dst != "" {
		return fmt.Errorf("%s and %s_file are both set: set one of them", key, key)
	}
	data, err := c.readSecret(file, key)
	if err != nil {
		return err
	}
	if *dst = strings.TrimSpace(string(data)); *dst == "" {
		return fmt.Errorf("%s_file: %s is empty", key, file)
	}
	return nil
}

// readSecretListFile sets *dst to the entries of file, one per line or
// comma separated, trimmed, # lines left out, unless file is empty. Both
// set and a missing file are errors naming key.
func (c *Config) readSecretListFile(dst *[]string, file, key string) error {
	if file == "" {
		return nil
	}
	if len(*dst) > 0 {
		return fmt.Errorf("%s and %s_file are both set: set one of them", key, key)
	}
	data, err := c.readSecret(file, key)
	if err != nil {
		return err
	}
	*dst = nil
	for _, line := range strings.FieldsFunc(string(data), func(r rune) bool { return r == '\n' || r == ',' }) {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			*dst = append(*dst, line)
		}
	}
	return nil
}

// Redacted returns a copy of c that is safe to print: the operator token and
// every relay secret are replaced by "<redacted>", and a password in the
// store URL (its user info, or a PostgreSQL URL's password= option) by
// "xxxxx". The *_file keys, which name files, stay.
func (c Config) Redacted() Config {
	if c.OperatorToken != "" {
		c.OperatorToken = redactedValue
	}
	if len(c.Relay.Secrets) > 0 {
		secrets := make([]string, len(c.Relay.Secrets))
		for i := range secrets {
			secrets[i] = redactedValue
		}
		c.Relay.Secrets = secrets
	}
	if u, err := url.Parse(c.Store); err == nil && (u.User != nil || u.Query().Has("password")) {
		if q := u.Query(); q.Has("password") {
			// A PostgreSQL URL may carry its password as an option.
			q.Set("password", "xxxxx")
			u.RawQuery = q.Encode()
		}
		c.Store = u.Redacted()
	} else if err != nil && (strings.Contains(c.Store, "@") || strings.Contains(c.Store, "password")) {
		// Not a URL but it may hold credentials: print none of it.
		c.Store = redactedValue
	}
	return c
}

// RedactedYAML returns c.Redacted() as YAML, keys in declaration order, each
// commented with its environment variable: what `chronos nas
// --print-config` prints, laid out as a config file.
func (c Config) RedactedYAML() ([]byte, error) {
	r := c.Redacted()
	out, err := envconfig.Document(&r, EnvPrefix)
	if err != nil {
		return nil, fmt.Errorf("print config: %w", err)
	}
	return out, nil
}

// noZero names the keys whose zero value stands for "unset" (the default
// then applies) but whose zero, written out, would mean something else:
// rate_per_second: 0 reads as "no calls at all", not as "20 a second". A
// zero written for one of them, in the file or the environment, is
// refused with a message that says so.
var noZero = []struct {
	path []string // the key in the YAML file
	env  string   // its environment variable, after EnvPrefix
	want string
}{
	{[]string{"limits", "rate_per_second"}, "LIMITS_RATE_PER_SECOND", "must be positive (API calls per second of one agent; leave it out for the default 20)"},
	{[]string{"limits", "burst"}, "LIMITS_BURST", "must be at least 1 (leave it out for the default 100)"},
	{[]string{"relay", "cron_key_max_age"}, "RELAY_CRON_KEY_MAX_AGE", "must be positive (how long a job's cron key of direct delivery is kept; leave it out for the default 720h)"},
}

// refuseZeros reports the noZero keys a config file sets to zero.
func refuseZeros(data []byte) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil || len(doc.Content) == 0 {
		return nil // parseConfigFile judged it
	}
	var errs []error
	for _, k := range noZero {
		if v := lookupNode(doc.Content[0], k.path); v != nil && isZero(v.Value) {
			errs = append(errs, fmt.Errorf("%s: %s, not %s", strings.Join(k.path, "."), k.want, v.Value))
		}
	}
	return errors.Join(errs...)
}

// refuseZeroEnv reports the noZero keys the environment sets to zero.
func refuseZeroEnv(lookup func(string) (string, bool)) error {
	if lookup == nil {
		return nil
	}
	var errs []error
	for _, k := range noZero {
		if v, ok := lookup(EnvPrefix + k.env); ok && isZero(v) {
			errs = append(errs, fmt.Errorf("%s%s: %s, not %s", EnvPrefix, k.env, k.want, v))
		}
	}
	return errors.Join(errs...)
}

// lookupNode finds the value of path in a mapping node, or nil.
func lookupNode(n *yaml.Node, path []string) *yaml.Node {
	for _, key := range path {
		if n.Kind != yaml.MappingNode {
			return nil
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == key {
				next = n.Content[i+1]
			}
		}
		if next == nil {
			return nil
		}
		n = next
	}
	return n
}

// isZero reports whether a scalar reads as the number zero.
func isZero(v string) bool {
	v = strings.TrimSpace(v)
	if d, err := time.ParseDuration(v); err == nil {
		return d == 0
	}
	f, err := strconv.ParseFloat(v, 64)
	return err == nil && f == 0
}
