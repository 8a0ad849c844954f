// Package envconfig overlays environment variables on a configuration
// struct. Each leaf key of the struct, named by its yaml tags, has one
// variable: a prefix followed by the dotted key in upper case with dots
// turned into underscores (relay.secrets under CHRONOS_NAS_ is
// CHRONOS_NAS_RELAY_SECRETS). A field that is not in the file (yaml:"-") can
// still be read from the variable its env tag names. Lists are comma
// separated; every value is trimmed of surrounding white space.
package envconfig

import (
	"encoding"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// Lookup returns the value of an environment variable and whether it is set,
// like os.LookupEnv.
type Lookup func(name string) (string, bool)

// Field is one leaf key of a config struct.
type Field struct {
	// Key is the dotted YAML key (relay.secrets); empty for a field that is
	// read from the environment only.
	Key string
	// Env is the field's environment variable.
	Env string
	// Value is the field itself, settable.
	Value reflect.Value
}

// Fields lists every leaf field of the struct cfg points to, in declaration
// order, with its variable under prefix. Nested structs are sections; fields
// tagged yaml:"-" are left out unless they carry an env tag.
func Fields(cfg any, prefix string) []Field {
	v := reflect.ValueOf(cfg)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		panic(fmt.Sprintf("envconfig: %T is not a pointer to a struct", cfg))
	}
	var out []Field
	walk(v.Elem(), "", prefix, &out)
	return out
}

// walk appends the leaf fields of the struct v to out.
func walk(v reflect.Value, keyPrefix, envPrefix string, out *[]Field) {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		if !sf.IsExported() {
			continue
		}
		tag, _, _ := strings.Cut(sf.Tag.Get("yaml"), ",")
		if tag == "" || tag == "-" {
			if env := sf.Tag.Get("env"); env != "" {
				*out = append(*out, Field{Env: env, Value: v.Field(i)})
			}
			continue
		}
		key := keyPrefix + tag
		if fv := v.Field(i); fv.Kind() == reflect.Struct && fv.Type() != reflect.TypeOf(time.Time{}) {
			walk(fv, key+".", envPrefix, out)
			continue
		}
		env := sf.Tag.Get("env")
		if env == "" {
			env = envPrefix + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
		}
		*out = append(*out, Field{Key: key, Env: env, Value: v.Field(i)})
	}
}

// Names lists the variables of the struct cfg points to.
func Names(cfg any, prefix string) []string {
	fields := Fields(cfg, prefix)
	names := make([]string, len(fields))
	for i, f := range fields {
		names[i] = f.Env
	}
	return names
}

// Apply sets every field of the struct cfg points to whose variable lookup
// finds; a variable that is set, even to the empty string, wins over what
// the struct held. An error names the variable and its key.
func Apply(cfg any, prefix string, lookup Lookup) error {
	var errs []error
	for _, f := range Fields(cfg, prefix) {
		s, ok := lookup(f.Env)
		if !ok {
			continue
		}
		if err := Set(f.Value, s); err != nil {
			if f.Key == "" {
				errs = append(errs, fmt.Errorf("%s: %w", f.Env, err))
			} else {
				errs = append(errs, fmt.Errorf("%s (%s): %w", f.Env, f.Key, err))
			}
		}
	}
	return errors.Join(errs...)
}

// Unknown reports every variable of environ (NAME=value pairs, as
// os.Environ returns them) that starts with prefix but is neither the
// variable of a field of the struct cfg points to nor one of allowed: a
// misspelt variable must not silently leave a setting at its default.
func Unknown(cfg any, prefix string, environ []string, allowed ...string) []string {
	known := map[string]bool{}
	for _, n := range Names(cfg, prefix) {
		known[n] = true
	}
	for _, n := range allowed {
		known[n] = true
	}
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, prefix) && !known[name] {
			out = append(out, name)
		}
	}
	return out
}

// Set parses s into v: a type that implements encoding.TextUnmarshaler
// (through its pointer), a string, bool, int, *int, float64, *float64,
// time.Duration (a Go duration string) or []string (comma separated, empty
// items dropped). s is trimmed of surrounding white space.
func Set(v reflect.Value, s string) error {
	s = strings.TrimSpace(s)
	if v.CanAddr() {
		if u, ok := v.Addr().Interface().(encoding.TextUnmarshaler); ok {
			return u.UnmarshalText([]byte(s))
		}
	}
	switch v.Interface().(type) {
	case time.Duration:
		d, err := time.ParseDuration(s)
		if err != nil {
			return err
		}
		v.SetInt(int64(d))
		return nil
	case []string:
		v.Set(reflect.ValueOf(SplitList(s)))
		return nil
	case *int:
		n, err := strconv.Atoi(s)
		if err != nil {
			return err
		}
		v.Set(reflect.ValueOf(&n))
		return nil
	case *float64:
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return err
		}
		v.Set(reflect.ValueOf(&f))
		return nil
	}
	return setScalar(v, s)
}

// setScalar parses s into a field of a basic kind.
func setScalar(v reflect.Value, s string) error {
	switch v.Kind() {
	case reflect.String:
		v.SetString(s)
	case reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return err
		}
		v.SetBool(b)
	case reflect.Int:
		n, err := strconv.Atoi(s)
		if err != nil {
			return err
		}
		v.SetInt(int64(n))
	case reflect.Float64:
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return err
		}
		v.SetFloat(f)
	default:
		return fmt.Errorf("unsupported type %s", v.Type())
	}
	return nil
}

// SplitList splits a comma-separated list, trimming each item and dropping
// empty ones; nil when nothing is left.
func SplitList(s string) []string {
	var list []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			list = append(list, p)
		}
	}
	return list
}
