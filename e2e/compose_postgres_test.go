package e2e

import (
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// readComposeAt reads the compose file at path, relative to the
// repository's root, and each service's restart policy.
func readComposeAt(t *testing.T, path string) (composeFile, map[string]string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, path))
	if err != nil {
		t.Fatal(err)
	}
	var c composeFile
	if err := yaml.Unmarshal(data, &c); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var restarts struct {
		Services map[string]struct {
			Restart string `yaml:"restart"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(data, &restarts); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	restart := map[string]string{}
	for name, s := range restarts.Services {
		restart[name] = s.Restart
	}
	return c, restart
}

// TestComposePostgresFile checks deploy/compose.postgres.yaml, the compose
// deployment on PostgreSQL, against deploy/compose.yaml (which
// TestComposeFile checks on its own): the same Chronos services, defined
// alike but for the store; PostgreSQL with its data in a volume, fsync and
// synchronous_commit left on and a healthcheck; a one-shot, hardened
// `chronos nas migrate` that NAS waits for; and a store URL NAS accepts.
func TestComposePostgresFile(t *testing.T) {
	t.Parallel()
	base := readCompose(t)
	c, restart := readComposeAt(t, "deploy/compose.postgres.yaml")
	_, stages := readDockerfile(t)
	final := stages[len(stages)-1].name

	var want []string
	for name := range base.Services {
		if name != "redis" {
			want = append(want, name)
		}
	}
	want = append(want, "postgres", "migrate")
	slices.Sort(want)
	if got := sortedKeys(c.Services); !slices.Equal(got, want) {
		t.Fatalf("services %v, want %v", got, want)
	}

	nasEnv := maps.Clone(c.Services["nas"].Environment)
	// The services both files have are the same but for the store.
	store := ""
	for name, b := range base.Services {
		v, ok := c.Services[name]
		if !ok {
			continue
		}
		if s, ok := v.Environment["CHRONOS_NAS_STORE"]; ok {
			if store != "" && s != store {
				t.Errorf("%s: store %q, another service's is %q", name, s, store)
			}
			store = s
		}
		for _, env := range []map[string]string{b.Environment, v.Environment} {
			delete(env, "CHRONOS_NAS_STORE")
		}
		b.DependsOn, v.DependsOn = nil, nil
		if !reflect.DeepEqual(b, v) {
			t.Errorf("%s differs from compose.yaml's beyond the store:\n%+v\n%+v", name, v, b)
		}
	}
	if !strings.HasPrefix(store, "postgres://") {
		t.Fatalf("CHRONOS_NAS_STORE %q is not a postgres:// URL", store)
	}

	pg := c.Services["postgres"]
	if !strings.HasPrefix(pg.Image, "postgres:") {
		t.Errorf("postgres image %q", pg.Image)
	}
	if !slices.ContainsFunc(pg.Volumes, func(v string) bool {
		vol, path, _ := strings.Cut(v, ":")
		_, declared := c.Volumes[vol]
		return declared && path == "/var/lib/postgresql/data"
	}) {
		t.Errorf("postgres volumes %v: want a declared volume on /var/lib/postgresql/data", pg.Volumes)
	}
	if cmd := strings.Join(pg.Command, " "); strings.Contains(cmd, "fsync=off") || strings.Contains(cmd, "synchronous_commit=off") {
		t.Errorf("postgres command %q turns durability off", cmd)
	}
	if pg.Healthcheck == nil || !slices.Contains(pg.Healthcheck.Test, "pg_isready") {
		t.Errorf("postgres healthcheck %+v: want pg_isready", pg.Healthcheck)
	}

	m := c.Services["migrate"]
	if path, flags := chronosArgs(m.Command); strings.Join(path, " ") != "nas migrate" {
		t.Errorf("migrate runs chronos %v, want nas migrate", m.Command)
	} else {
		known := helpFlags(t, path)
		for _, f := range flags {
			if !slices.Contains(known, f) {
				t.Errorf("migrate: chronos nas migrate has no flag %s", f)
			}
		}
	}
	if m.Build == nil || m.Build.Target != final || !m.ReadOnly || !slices.Contains(m.Tmpfs, "/tmp") || !slices.Contains(m.CapDrop, "ALL") {
		t.Errorf("migrate is not built and hardened as the other Chronos services: %+v", m)
	}
	if !maps.Equal(m.Environment, nasEnv) || !slices.Equal(m.Volumes, c.Services["nas"].Volumes) {
		t.Errorf("migrate does not read NAS's configuration: %v %v", m.Environment, m.Volumes)
	}
	if restart["migrate"] != "no" {
		t.Errorf("migrate restarts %q, want \"no\" (a one-shot step)", restart["migrate"])
	}
	for svc, deps := range map[string]map[string]string{
		"migrate": {"postgres": "service_healthy", "setup": "service_completed_successfully"},
		"nas":     {"postgres": "service_healthy", "migrate": "service_completed_successfully"},
		"relay-1": {"postgres": "service_healthy", "nas": "service_healthy"},
		"relay-2": {"postgres": "service_healthy", "nas": "service_healthy"},
	} {
		for dep, cond := range deps {
			if got := c.Services[svc].DependsOn[dep].Condition; got != cond {
				t.Errorf("%s depends on %s %q, want %q", svc, dep, got, cond)
			}
		}
	}
	for name, svc := range c.Services {
		for dep := range svc.DependsOn {
			if _, ok := c.Services[dep]; !ok {
				t.Errorf("%s depends on %s, which is no service", name, dep)
			}
		}
		for _, v := range svc.Volumes {
			vol, _, _ := strings.Cut(v, ":")
			if _, ok := c.Volumes[vol]; !ok && !strings.HasPrefix(vol, ".") && !strings.HasPrefix(vol, "/") {
				t.Errorf("%s mounts volume %s, which is not declared", name, vol)
			}
		}
	}

	// NAS accepts the store URL, and prints it without its password.
	out := mustChronos(t, t.TempDir(), []string{
		"CHRONOS_NAS_PUBLIC_URL=http://nas:8080",
		"CHRONOS_NAS_RELAY_SECRETS=whsec_" + strings.Repeat("A", 44),
		"CHRONOS_NAS_AGENTS_FILE=agents.yaml",
		"CHRONOS_NAS_STORE=" + store,
	}, "nas", "--print-config")
	if !strings.Contains(out, "store: postgres://chronos:xxxxx@postgres:5432/chronos?") {
		t.Errorf("print-config of the compose store:\n%s", out)
	}
}
