package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/chain"
	"github.com/chronoscron/chronos/agent/notify"
)

// ChainsConfig is the chains section: who hears of a chain class's breaker
// opening and the policy of each class.
type ChainsConfig struct {
	// Notify are notify target specs (as jobs' --notify takes them) that
	// every class's breaker alerts go to.
	Notify []string `yaml:"notify"`
	// Classes are the classes' policies, by class name.
	Classes ChainClasses `yaml:"classes"`
}

// ChainClasses are the chains.classes entries by class name. In the
// environment (CHRONOS_CHAINS_CLASSES) they are one JSON object with the
// YAML's keys.
type ChainClasses map[string]ChainClassConfig

// UnmarshalText reads the JSON form of the environment.
func (c *ChainClasses) UnmarshalText(b []byte) error {
	m := map[string]ChainClassConfig{}
	if len(b) > 0 {
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&m); err != nil {
			return fmt.Errorf("want a JSON object of classes like {\"disk\":{\"max_depth\":3,\"lifetime\":\"30m\"}}: %w", err)
		}
	}
	*c = m
	return nil
}

// ChainClassConfig is one class's policy; unset keys take the defaults
// (max_depth 4, max_children 8, max_retries 3, lifetime 90m,
// max_concurrent 3, breaker_failures 3, breaker_window 30m,
// breaker_cooldown 60m, spawn_storm 20).
type ChainClassConfig struct {
	MaxDepth        int      `yaml:"max_depth" json:"max_depth"`
	MaxChildren     int      `yaml:"max_children" json:"max_children"`
	MaxRetries      *int     `yaml:"max_retries" json:"max_retries"`
	Lifetime        string   `yaml:"lifetime" json:"lifetime"`
	MaxConcurrent   int      `yaml:"max_concurrent" json:"max_concurrent"`
	BreakerFailures int      `yaml:"breaker_failures" json:"breaker_failures"`
	BreakerWindow   string   `yaml:"breaker_window" json:"breaker_window"`
	BreakerCooldown string   `yaml:"breaker_cooldown" json:"breaker_cooldown"`
	SpawnStorm      int      `yaml:"spawn_storm" json:"spawn_storm"`
	Notify          []string `yaml:"notify" json:"notify"`
}

// policy returns the class's policy, defaults filled, validated.
func (c ChainClassConfig) policy() (chain.Policy, []notify.Target, error) {
	p := chain.DefaultPolicy()
	set := func(dst *int, v int) {
		if v != 0 {
			*dst = v
		}
	}
	set(&p.Limits.MaxDepth, c.MaxDepth)
	set(&p.Limits.MaxChildren, c.MaxChildren)
	set(&p.Limits.MaxConcurrent, c.MaxConcurrent)
	set(&p.BreakerFailures, c.BreakerFailures)
	set(&p.SpawnStorm, c.SpawnStorm)
	if c.MaxRetries != nil {
		p.Limits.MaxRetries = *c.MaxRetries
	}
	var errs []error
	dur := func(key, s string, dst *time.Duration) {
		if s == "" {
			return
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s %q is not a duration (like 30m)", key, s))
			return
		}
		*dst = d
	}
	life := p.Limits.Lifetime.Std()
	dur("lifetime", c.Lifetime, &life)
	p.Limits.Lifetime = chain.Duration(life)
	dur("breaker_window", c.BreakerWindow, &p.BreakerWindow)
	dur("breaker_cooldown", c.BreakerCooldown, &p.BreakerCooldown)
	if c.MaxDepth < 0 || c.MaxChildren < 0 || c.MaxConcurrent < 0 || c.BreakerFailures < 0 || c.SpawnStorm < 0 {
		errs = append(errs, errors.New("limits must not be negative"))
	}
	if err := errors.Join(errs...); err != nil {
		return chain.Policy{}, nil, err
	}
	if err := p.Validate(); err != nil {
		return chain.Policy{}, nil, err
	}
	ts, err := parseTargets(c.Notify)
	return p, ts, err
}

func parseTargets(specs []string) ([]notify.Target, error) {
	var out []notify.Target
	for _, s := range specs {
		t, err := notify.ParseTarget(s)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// Agent returns the section as the runtime's chain config; an error names
// the first key that does not validate.
func (c ChainsConfig) Agent() (agent.ChainConfig, error) {
	out := agent.ChainConfig{Classes: map[string]agent.ChainClass{}}
	ts, err := parseTargets(c.Notify)
	if err != nil {
		return agent.ChainConfig{}, fmt.Errorf("chains.notify: %w", err)
	}
	out.Notify = ts
	names := make([]string, 0, len(c.Classes))
	for name := range c.Classes {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if err := chain.ValidName("chains.classes key", name); err != nil {
			return agent.ChainConfig{}, err
		}
		p, ts, err := c.Classes[name].policy()
		if err != nil {
			return agent.ChainConfig{}, fmt.Errorf("chains.classes.%s: %w", name, err)
		}
		out.Classes[name] = agent.ChainClass{Policy: p, Notify: ts}
	}
	return out, nil
}

// ChainConfig returns the chains section of a config that validated (an
// invalid section, which Validate reports, gives the defaults).
func (c Config) ChainConfig() agent.ChainConfig {
	out, err := c.Chains.Agent()
	if err != nil {
		return agent.ChainConfig{}
	}
	return out
}

// validateChains checks the chains section, its targets against the
// webhooks' address policy too.
func (c Config) validateChains() error {
	cc, err := c.Chains.Agent()
	if err != nil {
		return err
	}
	opts := notify.ValidateOptions{Addresses: c.NotifyAddresses()}
	all := cc.Notify
	for _, cl := range cc.Classes {
		all = append(all, cl.Notify...)
	}
	for _, t := range all {
		if err := notify.ValidateTarget(context.Background(), t, opts); err != nil {
			return fmt.Errorf("chains: notify target %s: %w", t.Where(), err)
		}
	}
	return nil
}
