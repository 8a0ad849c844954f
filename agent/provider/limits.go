package provider

import (
	"errors"
	"fmt"
	"strings"

	"github.com/chronoscron/chronos/agent/store"
)

// The size limits of the files the agent and the CLI read whole, their
// keys and their defaults, in one place. A file over its limit is refused
// unread, with an error naming the key.
const (
	// KeyMaxJobsFileBytes caps jobs.json.
	KeyMaxJobsFileBytes = "max_jobs_file_bytes"
	// KeyMaxSpecFileBytes caps a job spec file (chronos jobs add|edit --file).
	KeyMaxSpecFileBytes = "max_spec_file_bytes"

	// DefaultMaxJobsFileBytes is max_jobs_file_bytes when unset: 16 MiB.
	DefaultMaxJobsFileBytes = store.DefaultMaxFileBytes
	// DefaultMaxSpecFileBytes is max_spec_file_bytes when unset: 1 MiB.
	DefaultMaxSpecFileBytes = 1 << 20
)

// JobsFileLimit returns the cap of jobs.json: max_jobs_file_bytes, or its
// default when unset (or invalid: Validate reports it).
func (c Config) JobsFileLimit() store.Limit {
	return limit(KeyMaxJobsFileBytes, c.MaxJobsFileBytes, DefaultMaxJobsFileBytes)
}

// SpecFileLimit returns the cap of a job spec file: max_spec_file_bytes,
// or its default when unset (or invalid: Validate reports it).
func (c Config) SpecFileLimit() store.Limit {
	return limit(KeyMaxSpecFileBytes, c.MaxSpecFileBytes, DefaultMaxSpecFileBytes)
}

// limit is the limit of key, set to n (def when not positive); its Setting
// names the key and its variable.
func limit(key string, n, def int) store.Limit {
	if n <= 0 {
		n = def
	}
	return store.Limit{Bytes: int64(n), Setting: fmt.Sprintf("%s (%s%s)", key, EnvPrefix, strings.ToUpper(key))}
}

// validateLimits checks that each size limit that is set is a positive
// number of bytes.
func (c Config) validateLimits() error {
	var errs []error
	for _, l := range []struct {
		key string
		n   int
	}{{KeyMaxJobsFileBytes, c.MaxJobsFileBytes}, {KeyMaxSpecFileBytes, c.MaxSpecFileBytes}} {
		if l.n < 0 {
			errs = append(errs, fmt.Errorf("%s %d must be a positive number of bytes (or unset: the default)", l.key, l.n))
		}
	}
	return errors.Join(errs...)
}
