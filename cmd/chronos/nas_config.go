package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/chronoscron/chronos/nas"
)

// nasEnvPrefix prefixes every NAS setting in the environment.
const nasEnvPrefix = "CHRONOS_NAS_"

// nasConfigField is one leaf key of nas.Config.
type nasConfigField struct {
	Key   string        // dotted YAML key, e.g. relay.secrets
	Value reflect.Value // settable
}

// EnvName is the environment variable of the key.
func (f nasConfigField) EnvName() string {
	return nasEnvPrefix + strings.ToUpper(strings.ReplaceAll(f.Key, ".", "_"))
}

// nasConfigFields lists every leaf key of cfg in declaration order.
func nasConfigFields(cfg *nas.Config) []nasConfigField {
	var out []nasConfigField
	var walk func(v reflect.Value, prefix string)
	walk = func(v reflect.Value, prefix string) {
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			tag, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
			if tag == "" || tag == "-" {
				continue
			}
			fv := v.Field(i)
			if fv.Kind() == reflect.Struct {
				walk(fv, prefix+tag+".")
				continue
			}
			out = append(out, nasConfigField{Key: prefix + tag, Value: fv})
		}
	}
	walk(reflect.ValueOf(cfg).Elem(), "")
	return out
}

// setFromString parses s into a config field.
func setFromString(v reflect.Value, s string) error {
	switch v.Interface().(type) {
	case time.Duration:
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil {
			return err
		}
		v.SetInt(int64(d))
		return nil
	case []string:
		var list []string
		for _, p := range strings.Split(s, ",") {
			if p = strings.TrimSpace(p); p != "" {
				list = append(list, p)
			}
		}
		v.Set(reflect.ValueOf(list))
		return nil
	case *int:
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			return err
		}
		v.Set(reflect.ValueOf(&n))
		return nil
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(s)
	case reflect.Bool:
		b, err := strconv.ParseBool(strings.TrimSpace(s))
		if err != nil {
			return err
		}
		v.SetBool(b)
	case reflect.Int:
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			return err
		}
		v.SetInt(int64(n))
	case reflect.Float64:
		f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil {
			return err
		}
		v.SetFloat(f)
	default:
		return fmt.Errorf("unsupported type %s", v.Type())
	}
	return nil
}

// nasEnvNotKeys are CHRONOS_NAS_ variables that are not config keys: the
// config file's path and the base URL the dlq commands call.
var nasEnvNotKeys = map[string]bool{nasEnvPrefix + "CONFIG": true, nasEnvPrefix + "URL": true}

// checkNASEnv reports every CHRONOS_NAS_ variable of environ (KEY=value
// pairs) that names no config key: a misspelt variable must not silently
// leave a setting at its default.
func checkNASEnv(environ []string) error {
	known := map[string]bool{}
	var cfg nas.Config
	for _, f := range nasConfigFields(&cfg) {
		known[f.EnvName()] = true
	}
	var errs []error
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, nasEnvPrefix) && !known[name] && !nasEnvNotKeys[name] {
			errs = append(errs, fmt.Errorf("config: environment variable %s names no config key (see chronos nas --help)", name))
		}
	}
	return errors.Join(errs...)
}

// decodeNASYAML decodes a config file strictly: unknown keys are errors.
func decodeNASYAML(data []byte, cfg *nas.Config) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(cfg); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}

// listsFromScalars turns a single value written for a list key (relay.secrets:
// whsec_…) into a one-element list, as the environment reads it. It reports
// whether it changed anything.
func listsFromScalars(doc *yaml.Node, cfg *nas.Config) bool {
	changed := false
	lists := map[string]bool{}
	for _, f := range nasConfigFields(cfg) {
		if f.Value.Kind() == reflect.Slice {
			lists[f.Key] = true
		}
	}
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

// resolveNASPaths makes the relative file paths a config file names relative
// to the file's directory, so a config works from any working directory.
// Paths from the environment stay relative to the working directory.
func resolveNASPaths(cfg *nas.Config, dir string) {
	for _, p := range []*string{&cfg.AgentsFile, &cfg.SigningKeysDir, &cfg.Relay.SecretsFile, &cfg.OperatorTokenFile} {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
	}
}

// loadNASConfig reads the YAML file at path (optional: "" reads none), then
// the environment (CHRONOS_NAS_<KEY>), then secrets from *_file keys, and
// returns the config with defaults applied and validated.
func loadNASConfig(path string, getenv func(string) (string, bool)) (nas.Config, error) {
	var cfg nas.Config
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return nas.Config{}, fmt.Errorf("config: %w", err)
		}
		if err := decodeNASYAML(data, &cfg); err != nil {
			// A single value for a list key is read as a one-element list;
			// any other error is reported against the file as written.
			var doc yaml.Node
			if yaml.Unmarshal(data, &doc) != nil || !listsFromScalars(&doc, &cfg) {
				return nas.Config{}, fmt.Errorf("config %s: %w", path, err)
			}
			fixed, merr := yaml.Marshal(&doc)
			cfg = nas.Config{}
			if merr != nil || decodeNASYAML(fixed, &cfg) != nil {
				return nas.Config{}, fmt.Errorf("config %s: %w", path, err)
			}
		}
		resolveNASPaths(&cfg, filepath.Dir(path))
	}
	for _, f := range nasConfigFields(&cfg) {
		s, ok := getenv(f.EnvName())
		if !ok {
			continue
		}
		if err := setFromString(f.Value, s); err != nil {
			return nas.Config{}, fmt.Errorf("config: %s (%s): %w", f.EnvName(), f.Key, err)
		}
	}
	// A bearer token never has surrounding white space: a stray newline in a
	// variable or the file must not lock the operator out.
	cfg.OperatorToken = strings.TrimSpace(cfg.OperatorToken)
	if cfg.OperatorTokenFile != "" {
		data, err := os.ReadFile(cfg.OperatorTokenFile)
		if err != nil {
			return nas.Config{}, fmt.Errorf("config: operator_token_file: %w", err)
		}
		cfg.OperatorToken = strings.TrimSpace(string(data))
	}
	if cfg.Relay.SecretsFile != "" {
		data, err := os.ReadFile(cfg.Relay.SecretsFile)
		if err != nil {
			return nas.Config{}, fmt.Errorf("config: relay.secrets_file: %w", err)
		}
		cfg.Relay.Secrets = nil
		for _, line := range strings.FieldsFunc(string(data), func(r rune) bool { return r == '\n' || r == ',' }) {
			if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
				cfg.Relay.Secrets = append(cfg.Relay.Secrets, line)
			}
		}
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nas.Config{}, fmt.Errorf("config: %w", err)
	}
	return cfg, nil
}

// secretKeys are printed redacted.
var secretKeys = map[string]bool{"operator_token": true, "relay.secrets": true}

// printNASConfig writes cfg as YAML in declaration order, with each key's
// environment variable, secrets redacted.
func printNASConfig(cfg nas.Config) ([]byte, error) {
	root := &yaml.Node{Kind: yaml.MappingNode}
	sections := map[string]*yaml.Node{}
	for _, f := range nasConfigFields(&cfg) {
		parent := root
		name := f.Key
		if sec, leaf, ok := strings.Cut(f.Key, "."); ok {
			if sections[sec] == nil {
				sections[sec] = &yaml.Node{Kind: yaml.MappingNode}
				root.Content = append(root.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: sec}, sections[sec])
			}
			parent, name = sections[sec], leaf
		}
		val := &yaml.Node{}
		v := f.Value.Interface()
		switch x := v.(type) {
		case time.Duration:
			v = x.String()
		case *int:
			if x != nil {
				v = *x
			}
		}
		if secretKeys[f.Key] && !f.Value.IsZero() {
			v = "<redacted>"
		}
		if err := val.Encode(v); err != nil {
			return nil, fmt.Errorf("print config: %s: %w", f.Key, err)
		}
		key := &yaml.Node{Kind: yaml.ScalarNode, Value: name}
		if val.Kind == yaml.SequenceNode {
			// A flow sequence carries the comment itself.
			val.Style, val.LineComment = yaml.FlowStyle, f.EnvName()
		} else {
			key.LineComment = f.EnvName()
		}
		parent.Content = append(parent.Content, key, val)
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(root); err != nil {
		return nil, fmt.Errorf("print config: %w", err)
	}
	return buf.Bytes(), nil
}
