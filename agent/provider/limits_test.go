package provider

import (
	"strings"
	"testing"
)

// TestFileLimits pins the size limits' defaults, their settings from the
// file and the environment, and the errors of values that are not a
// positive number of bytes, which name the key.
func TestFileLimits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		yaml       string
		env        map[string]string
		jobs, spec int64
		err        string
	}{
		{name: "defaults", jobs: 16 << 20, spec: 1 << 20},
		{name: "file", yaml: "max_jobs_file_bytes: 1000000\nmax_spec_file_bytes: 4096\n", jobs: 1000000, spec: 4096},
		{name: "environment wins", yaml: "max_jobs_file_bytes: 1000000\n",
			env: map[string]string{"CHRONOS_MAX_JOBS_FILE_BYTES": "2000000", "CHRONOS_MAX_SPEC_FILE_BYTES": "512"}, jobs: 2000000, spec: 512},
		{name: "negative jobs", yaml: "max_jobs_file_bytes: -1\n", err: "max_jobs_file_bytes -1 must be a positive number of bytes"},
		{name: "negative spec", env: map[string]string{"CHRONOS_MAX_SPEC_FILE_BYTES": "-5"}, err: "max_spec_file_bytes -5 must be a positive number of bytes"},
		{name: "not a number", env: map[string]string{"CHRONOS_MAX_JOBS_FILE_BYTES": "64MiB"}, err: "CHRONOS_MAX_JOBS_FILE_BYTES"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := ParseConfig([]byte("home: /h\nlisten: 127.0.0.1:1\n" + tc.yaml))
			if err == nil {
				err = c.ApplyEnv(func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok })
			}
			if err == nil {
				err = c.Validate()
			}
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			jl, sl := c.JobsFileLimit(), c.SpecFileLimit()
			if jl.Bytes != tc.jobs || sl.Bytes != tc.spec {
				t.Fatalf("limits %d, %d; want %d, %d", jl.Bytes, sl.Bytes, tc.jobs, tc.spec)
			}
			if jl.Setting != "max_jobs_file_bytes (CHRONOS_MAX_JOBS_FILE_BYTES)" || sl.Setting != "max_spec_file_bytes (CHRONOS_MAX_SPEC_FILE_BYTES)" {
				t.Fatalf("settings %q, %q", jl.Setting, sl.Setting)
			}
		})
	}
}
