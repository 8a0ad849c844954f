package provider

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/chronoscron/chronos/agent/inputs"
	"github.com/chronoscron/chronos/agent/notify"
	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/internal/envconfig"
)

// Provider names.
const (
	// Chronos arms one one-shot per job at NAS and is woken by NAS's fires.
	Chronos = "chronos"
	// Builtin is the in-process timer: it sleeps until the earliest
	// next_run_at and fires through the same claim path.
	Builtin = "builtin"
)

// DefaultListen is the agent's listen address when the config names none.
const DefaultListen = "127.0.0.1:8787"

// DefaultUIListen is the address of the local API and dashboard when the
// config does not set ui_listen.
const DefaultUIListen = "127.0.0.1:8788"

// UIOff, as ui_listen, disables the local API and dashboard.
const UIOff = "off"

// UIEnabled reports whether the local API and dashboard are served.
func (c Config) UIEnabled() bool {
	v := strings.TrimSpace(c.UIListen)
	return v != "" && !strings.EqualFold(v, UIOff)
}

// UILoopback reports whether ui_listen names a loopback address only
// (localhost, 127.0.0.0/8 or ::1); an address without a host listens on
// every interface and is not.
func (c Config) UILoopback() bool {
	host, _, err := net.SplitHostPort(strings.TrimSpace(c.UIListen))
	if err != nil || host == "" {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// Config is the agent's configuration file (agent.yaml). Every key can also
// be set in the environment as CHRONOS_<KEY> with dots turned into
// underscores (cron.chronos.portal_url is CHRONOS_CRON_CHRONOS_PORTAL_URL);
// the environment wins. A relative path in the file (home,
// cron.chronos.access_token_file) is relative to the file's directory; one
// from the environment, to the working directory. The access token is never in the file: it comes from
// CHRONOS_ACCESS_TOKEN or from the file cron.chronos.access_token_file names.
type Config struct {
	// Home is the agent's home directory (jobs.json, runs/, output/).
	// Default: ~/.chronos.
	Home string `yaml:"home"`
	// Listen is the address the fire endpoint listens on when no socket is
	// passed by systemd. Default: 127.0.0.1:8787.
	Listen string `yaml:"listen"`
	// Timezone is the IANA zone of jobs that name none. Default: UTC.
	Timezone string `yaml:"timezone"`
	// UIListen is the address of the agent's local API and dashboard, a
	// listener of its own (never the fire listener). Default:
	// 127.0.0.1:8788; empty (set explicitly) or "off" disables it. An
	// address that is not loopback needs UITokenFile.
	UIListen string `yaml:"ui_listen"`
	// UITokenFile holds the local API's admin token (trimmed), needed for
	// every change made through it. Default: <home>/ui-token, created with
	// a random token at the first start.
	UITokenFile string `yaml:"ui_token_file"`
	// UIHosts are the host names (or addresses) a request to the local API
	// may carry in its Host header besides the host of ui_listen, localhost,
	// the loopback addresses and the address it arrived on: the names a
	// TLS proxy or the hosts file gives the listener. Any other Host is
	// refused (DNS rebinding). Names only: no scheme, port, path or
	// wildcard.
	UIHosts []string `yaml:"ui_hosts"`
	// Cron selects the provider.
	Cron CronConfig `yaml:"cron"`
	// Notify says which addresses the webhooks of job notifications may
	// reach.
	Notify NotifyConfig `yaml:"notify"`
	// Chains are the chain classes' limits and breakers and who hears of a
	// breaker opening.
	Chains ChainsConfig `yaml:"chains"`
	// SQL names the databases fanout jobs' sql://NAME?QUERY inputs may
	// query.
	SQL SQLConfig `yaml:"sql"`
	// MaxJobsFileBytes caps jobs.json, which is read whole: a larger file
	// is refused unread (and a running agent keeps its last good jobs).
	// Default: 16 MiB. See limits.go.
	MaxJobsFileBytes int `yaml:"max_jobs_file_bytes"`
	// MaxSpecFileBytes caps a job spec file (chronos jobs add|edit --file).
	// Default: 1 MiB.
	MaxSpecFileBytes int `yaml:"max_spec_file_bytes"`
}

// SQLConfig is the sql section: the only databases a fanout's sql:// input
// can reach, by name. A job names a database, never a DSN.
type SQLConfig struct {
	// DSNs lists NAME=DSN entries: NAME=sqlite:/path/to.db (SQLite) or
	// NAME=postgres://user@host/db (PostgreSQL).
	DSNs []string `yaml:"dsns"`
}

// Databases returns the section's databases by name; an error names an
// entry that does not parse or a name given twice.
func (s SQLConfig) Databases() (map[string]inputs.DSN, error) {
	out := make(map[string]inputs.DSN, len(s.DSNs))
	for _, e := range s.DSNs {
		name, value, ok := strings.Cut(strings.TrimSpace(e), "=")
		if !ok {
			return nil, fmt.Errorf("sql.dsns: %q must be NAME=DSN", e)
		}
		d, err := inputs.ParseDSN(strings.TrimSpace(name), value)
		if err != nil {
			return nil, fmt.Errorf("sql.dsns: %w", err)
		}
		if _, dup := out[strings.TrimSpace(name)]; dup {
			return nil, fmt.Errorf("sql.dsns: %s is given twice", name)
		}
		out[strings.TrimSpace(name)] = d
	}
	return out, nil
}

// NotifyConfig is the notify section: the addresses job notification
// webhooks may reach besides public ones, checked when a job is added or
// edited and again when each connection is made.
type NotifyConfig struct {
	// AllowPrivate lets webhooks reach loopback, private, link-local and
	// other non-public addresses (a receiver on this host or the LAN).
	// Default: false.
	AllowPrivate bool `yaml:"allow_private"`
	// Allow lists CIDR prefixes (10.20.0.0/16, fd00::/8) webhooks may
	// always reach; a bare address is one host.
	Allow []string `yaml:"allow"`
}

// Addresses returns the section as the webhooks' address policy; an error
// names an entry of notify.allow that is not a prefix or an address.
func (n NotifyConfig) Addresses() (notify.AddressPolicy, error) {
	p := notify.AddressPolicy{AllowPrivate: n.AllowPrivate}
	for _, s := range n.Allow {
		pre, err := netip.ParsePrefix(s)
		if err != nil {
			ip, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return notify.AddressPolicy{}, fmt.Errorf("notify.allow: %q is not a CIDR prefix (like 10.20.0.0/16) or an address", s)
			}
			pre = netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen())
		}
		p.Allow = append(p.Allow, pre.Masked())
	}
	return p, nil
}

// NotifyResolveTimeout bounds the name resolution of CheckNotify.
const NotifyResolveTimeout = 5 * time.Second

// NotifyAddresses returns the webhooks' address policy of a config that
// validated (Validate reports an entry of notify.allow that does not parse;
// here such an entry allows nothing).
func (c Config) NotifyAddresses() notify.AddressPolicy {
	p := notify.AddressPolicy{AllowPrivate: c.Notify.AllowPrivate}
	for _, s := range c.Notify.Allow {
		if one, err := (NotifyConfig{Allow: []string{s}}).Addresses(); err == nil {
			p.Allow = append(p.Allow, one.Allow...)
		}
	}
	return p
}

// CheckNotify validates a job's notification policy as the agent of c
// would send it, resolving webhook host names now with r
// (net.DefaultResolver) for at most NotifyResolveTimeout; a name that does
// not resolve in time is left to the check at connection time. An address
// the config refuses fails with notify.ErrAddressNotAllowed and names the
// settings that allow it.
func (c Config) CheckNotify(ctx context.Context, p notify.Policy, r notify.Resolver) error {
	addrs, err := c.Notify.Addresses()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, NotifyResolveTimeout)
	defer cancel()
	err = p.Validate(ctx, notify.ValidateOptions{Addresses: addrs, Resolver: r})
	if errors.Is(err, notify.ErrAddressNotAllowed) {
		return fmt.Errorf("%w (to allow it, set notify.allow_private: true or list its prefix in notify.allow in the agent config, or %sNOTIFY_ALLOW_PRIVATE=true / %sNOTIFY_ALLOW)", err, EnvPrefix, EnvPrefix)
	}
	return err
}

// CronConfig is the cron section.
type CronConfig struct {
	// Provider is "chronos" to use NAS, or empty (or "builtin") for the
	// built-in timer.
	Provider string `yaml:"provider"`
	// Chronos configures the chronos provider.
	Chronos ChronosConfig `yaml:"chronos"`
}

// ChronosConfig is the cron.chronos section.
type ChronosConfig struct {
	// PortalURL is NAS's base URL; also the expected iss of fire tokens
	// unless Issuer is set.
	PortalURL string `yaml:"portal_url"`
	// CallbackURL is this agent's public base URL; NAS POSTs
	// {callback_url}/api/cron/fire.
	CallbackURL string `yaml:"callback_url"`
	// ExpectedAudience is this agent's aud: agent:{instance_id}.
	ExpectedAudience string `yaml:"expected_audience"`
	// NASJWKSURL is NAS's key set for verifying fire tokens.
	NASJWKSURL string `yaml:"nas_jwks_url"`
	// AccessTokenFile holds the agent's access token for NAS (trimmed).
	AccessTokenFile string `yaml:"access_token_file"`
	// Issuer overrides the expected iss of fire tokens. Default: PortalURL.
	Issuer string `yaml:"issuer"`
	// ResyncInterval is how often a running agent reconciles with NAS
	// although nothing changed, so that a fire that never arrives is
	// noticed while it is awake (a Go duration, at least 1s). Default: 5m.
	ResyncInterval string `yaml:"resync_interval"`
	// Delivery asks NAS how to deliver this agent's fires: "nas" (the
	// default: NAS signs each fire with its own key) or "direct" (NAS
	// mints a key per job at provision, and the relay's dispatcher signs
	// and delivers each fire itself, NAS off the fire path). NAS grants
	// direct delivery only to agents its agents file allows it for.
	Delivery string `yaml:"delivery"`

	// AccessToken is the token itself, from CHRONOS_ACCESS_TOKEN or read
	// from AccessTokenFile by the caller; never read from YAML.
	AccessToken string `yaml:"-" env:"CHRONOS_ACCESS_TOKEN"`
	// AccessTokenErr is why reading AccessTokenFile failed, if it did.
	AccessTokenErr error `yaml:"-"`
}

// ExpectedIssuer returns the iss fire tokens must carry.
func (c ChronosConfig) ExpectedIssuer() string {
	if c.Issuer != "" {
		return c.Issuer
	}
	return c.PortalURL
}

// DeliveryMode returns cron.chronos.delivery: contract.DeliveryNAS when it
// is empty, an error naming the key and the values it takes when it is not
// a mode.
func (c ChronosConfig) DeliveryMode() (string, error) {
	switch d := strings.TrimSpace(c.Delivery); d {
	case "", contract.DeliveryNAS:
		return contract.DeliveryNAS, nil
	case contract.DeliveryDirect:
		return contract.DeliveryDirect, nil
	default:
		return "", fmt.Errorf("cron.chronos.delivery %q is not a delivery mode (want %q or %q)", c.Delivery, contract.DeliveryDirect, contract.DeliveryNAS)
	}
}

// Direct reports whether cron.chronos.delivery asks for direct delivery.
func (c ChronosConfig) Direct() bool {
	d, err := c.DeliveryMode()
	return err == nil && d == contract.DeliveryDirect
}

// minResyncInterval bounds cron.chronos.resync_interval from below.
const minResyncInterval = time.Second

// Resync returns cron.chronos.resync_interval as a duration: the default
// when it is empty, an error naming the key when it is not a duration of at
// least 1s.
func (c ChronosConfig) Resync() (time.Duration, error) {
	if c.ResyncInterval == "" {
		return DefaultResyncInterval, nil
	}
	d, err := time.ParseDuration(c.ResyncInterval)
	if err != nil {
		return 0, fmt.Errorf("cron.chronos.resync_interval %q is not a duration (like 5m or 30s)", c.ResyncInterval)
	}
	if d < minResyncInterval {
		return 0, fmt.Errorf("cron.chronos.resync_interval %s must be at least %s", d, minResyncInterval)
	}
	return d, nil
}

// ParseConfig reads a YAML config strictly: unknown keys are errors.
func ParseConfig(data []byte) (Config, error) {
	var c Config
	if len(bytes.TrimSpace(data)) == 0 {
		return c, nil
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		return Config{}, fmt.Errorf("provider: config: %w", oneLineError{err})
	}
	return c, nil
}

// oneLineError shows a multi-line error (the YAML decoder lists each problem
// on its own line) on one line, so a command reports it as one line.
type oneLineError struct{ err error }

func (e oneLineError) Error() string {
	var b strings.Builder
	for i, l := range strings.Split(strings.TrimSpace(e.err.Error()), "\n") {
		if i > 0 {
			if strings.HasSuffix(b.String(), ":") {
				b.WriteString(" ")
			} else {
				b.WriteString("; ")
			}
		}
		b.WriteString(strings.TrimSpace(l))
	}
	return b.String()
}

func (e oneLineError) Unwrap() error { return e.err }

// EnvAccessToken is the environment variable holding the access token.
const EnvAccessToken = "CHRONOS_ACCESS_TOKEN"

// EnvPrefix prefixes the variable of every agent config key: CHRONOS_ and
// the key in upper case with dots turned into underscores.
const EnvPrefix = "CHRONOS_"

// EnvNames lists every environment variable ApplyEnv reads.
func EnvNames() []string { return envconfig.Names(&Config{}, EnvPrefix) }

// ApplyEnv overrides c's fields with the variables lookup finds (a variable
// that is set, even to the empty string, wins over the file). Values are
// trimmed of surrounding white space; lists are comma separated. An error
// names each variable whose value does not parse (notify.allow_private
// wants a boolean).
func (c *Config) ApplyEnv(lookup func(string) (string, bool)) error {
	if err := envconfig.Apply(c, EnvPrefix, lookup); err != nil {
		return fmt.Errorf("provider: config: %w", oneLineError{err})
	}
	return nil
}

// Location returns the configured zone (UTC when empty).
func (c Config) Location() (*time.Location, error) {
	if c.Timezone == "" {
		return time.UTC, nil
	}
	loc, err := time.LoadLocation(c.Timezone)
	if err != nil {
		return nil, fmt.Errorf("provider: timezone %q: %w", c.Timezone, err)
	}
	return loc, nil
}

// Validate checks the settings every provider needs (home, listen,
// timezone), that cron.chronos.resync_interval, when set, is a valid
// duration, that cron.chronos.delivery, when set, is direct or nas, that notify.allow lists prefixes, and that the size limits
// (max_jobs_file_bytes, max_spec_file_bytes) are positive. The other chronos settings are judged by Decide instead: a
// missing one selects the built-in timer rather than failing.
func (c Config) Validate() error {
	var errs []error
	if c.Home == "" {
		errs = append(errs, errors.New("home: required"))
	}
	if c.Listen == "" {
		errs = append(errs, errors.New("listen: required"))
	}
	if c.Timezone != "" {
		if _, err := time.LoadLocation(c.Timezone); err != nil {
			errs = append(errs, fmt.Errorf("timezone %q: %w", c.Timezone, err))
		}
	}
	if _, err := c.Cron.Chronos.Resync(); err != nil {
		errs = append(errs, err)
	}
	if _, err := c.Cron.Chronos.DeliveryMode(); err != nil {
		errs = append(errs, err)
	}
	if _, err := c.Notify.Addresses(); err != nil {
		errs = append(errs, err)
	}
	if _, err := c.SQL.Databases(); err != nil {
		errs = append(errs, err)
	}
	if err := c.ValidateUI(); err != nil {
		errs = append(errs, err)
	}
	if err := c.validateChains(); err != nil {
		errs = append(errs, err)
	}
	if err := c.validateLimits(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("provider: config: %w", oneLineError{err})
	}
	return nil
}

// ValidateUI checks ui_listen: a host:port, and a loopback one unless
// ui_token_file names the admin token (Validate checks it too); and that
// each of ui_hosts is a host name or an IP address.
func (c Config) ValidateUI() error {
	for _, h := range c.UIHosts {
		if !validUIHost(h) {
			return fmt.Errorf("ui_hosts: %q is not a host name or IP address (give names only: no scheme, port, path or wildcard)", h)
		}
	}
	if !c.UIEnabled() {
		return nil
	}
	if _, _, err := net.SplitHostPort(strings.TrimSpace(c.UIListen)); err != nil {
		return fmt.Errorf("ui_listen %q is not host:port (or %q to disable the local API)", c.UIListen, UIOff)
	}
	if !c.UILoopback() && strings.TrimSpace(c.UITokenFile) == "" {
		return fmt.Errorf("ui_listen %q is not a loopback address: set ui_token_file to the admin token the local API then requires (or listen on 127.0.0.1)", c.UIListen)
	}
	return nil
}

// validUIHost reports whether h is an IP address (IPv6 with or without
// brackets) or a DNS name: dot-separated labels of letters, digits and
// hyphens, none empty or longer than 63, a hyphen at neither end, at most
// 253 in all; one trailing dot is allowed.
func validUIHost(h string) bool {
	if ip, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")); err == nil {
		bracketed := strings.HasPrefix(h, "[")
		return ip.Zone() == "" && bracketed == strings.HasSuffix(h, "]") && (!bracketed || ip.Is6())
	}
	name := strings.TrimSuffix(h, ".")
	if name == "" || len(name) > 253 {
		return false
	}
	for label := range strings.SplitSeq(name, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-') {
				return false
			}
		}
	}
	return true
}

// Decision is which provider the agent uses and why.
type Decision struct {
	// Provider is Chronos or Builtin.
	Provider string `json:"provider"`
	// Reasons says why Chronos is not in use: one line per missing or
	// invalid setting (empty when Provider is Chronos).
	Reasons []string `json:"reasons,omitempty"`
	// Named is true when the config named a provider other than the
	// built-in timer (cron.provider: chronos, or an unknown name) that is
	// not usable: a process that serves fires must not start on it (Err).
	Named bool `json:"named,omitempty"`
}

// Err is the error a serving agent refuses to start with: the config named
// a provider that cannot be used (a setting missing or invalid), and
// falling back to the built-in timer would hide it. Nil otherwise.
func (d Decision) Err() error {
	if !d.Named || d.Chronos() {
		return nil
	}
	why := make([]string, 0, len(d.Reasons))
	for _, r := range d.Reasons {
		if r != fallbackReason {
			why = append(why, r)
		}
	}
	return fmt.Errorf("cron.provider names a provider that cannot be used: %s (fix the config, or set cron.provider: builtin for the built-in timer)", strings.Join(why, "; "))
}

// fallbackReason ends the reasons of a chronos provider that is not usable.
const fallbackReason = "falling back to the built-in timer"

// Chronos reports whether the chronos provider is in use.
func (d Decision) Chronos() bool { return d.Provider == Chronos }

// Why returns a one-line explanation of the decision.
func (d Decision) Why() string {
	if d.Chronos() {
		return "cron.provider is chronos and every cron.chronos setting is valid"
	}
	return strings.Join(d.Reasons, "; ")
}

// Decide chooses the provider from c alone, without any network call. The
// chronos provider needs cron.provider: chronos, absolute http(s) URLs in
// portal_url, callback_url and nas_jwks_url, an expected_audience of the
// form agent:{instance_id}, and an access token; anything missing or
// invalid selects the built-in timer, and Reasons names each problem;
// since the config named the chronos provider, Named is set and a serving
// agent refuses to start (Err).
func Decide(c Config) Decision {
	switch c.Cron.Provider {
	case "":
		return Decision{Provider: Builtin, Reasons: []string{"cron.provider is empty: the built-in timer is used"}}
	case Builtin:
		return Decision{Provider: Builtin, Reasons: []string{"cron.provider is builtin: the built-in timer is used"}}
	case Chronos:
	default:
		return Decision{Provider: Builtin, Named: true, Reasons: []string{fmt.Sprintf("cron.provider %q is not known (want %q, %q or empty)", c.Cron.Provider, Chronos, Builtin)}}
	}
	ch := c.Cron.Chronos
	var why []string
	checkURL := func(key, v string) {
		if v == "" {
			why = append(why, "cron.chronos."+key+" is missing")
			return
		}
		u, err := url.Parse(v)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			why = append(why, fmt.Sprintf("cron.chronos.%s %q is not an absolute http(s) URL", key, v))
			return
		}
		if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
			why = append(why, fmt.Sprintf("cron.chronos.%s must not carry credentials, a query or a fragment", key))
		}
	}
	checkURL("portal_url", ch.PortalURL)
	checkURL("callback_url", ch.CallbackURL)
	checkURL("nas_jwks_url", ch.NASJWKSURL)
	switch aud := ch.ExpectedAudience; {
	case aud == "":
		why = append(why, "cron.chronos.expected_audience is missing")
	case !strings.HasPrefix(aud, contract.AudiencePrefix) || len(aud) == len(contract.AudiencePrefix):
		why = append(why, fmt.Sprintf("cron.chronos.expected_audience %q must be %s{instance_id}", aud, contract.AudiencePrefix))
	}
	switch {
	case ch.AccessToken != "":
	case ch.AccessTokenErr != nil:
		why = append(why, fmt.Sprintf("cron.chronos.access_token_file: %v", ch.AccessTokenErr))
	case ch.AccessTokenFile != "":
		why = append(why, fmt.Sprintf("cron.chronos.access_token_file %q is empty", ch.AccessTokenFile))
	default:
		why = append(why, "no access token: set "+EnvAccessToken+" or cron.chronos.access_token_file")
	}
	if len(why) > 0 {
		why = append(why, fallbackReason)
		return Decision{Provider: Builtin, Named: true, Reasons: why}
	}
	return Decision{Provider: Chronos}
}

// SQLDatabases returns the databases of a config that validated (an entry
// that does not parse registers nothing).
func (c Config) SQLDatabases() map[string]inputs.DSN {
	out := map[string]inputs.DSN{}
	for _, e := range c.SQL.DSNs {
		if one, err := (SQLConfig{DSNs: []string{e}}).Databases(); err == nil {
			for k, v := range one {
				out[k] = v
			}
		}
	}
	return out
}
