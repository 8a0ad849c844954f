package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestReadmeInstall checks the README's install section: a `go install`
// line for the module's own ./cmd/chronos (the module path of go.mod), run
// here as `make install` does it into a GOBIN of the test's, after which
// `chronos version` answers; `make build` and the install line put the
// binary where every systemd unit's ExecStart expects it. It also spells
// NAS out where the README first names it.
func TestReadmeInstall(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	gomod, err := os.ReadFile(filepath.Join(repoRoot, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	module := regexp.MustCompile(`(?m)^module (\S+)`).FindSubmatch(gomod)
	if module == nil {
		t.Fatal("go.mod names no module")
	}
	if !regexp.MustCompile(`(?m)^## Install$`).Match(readme) {
		t.Error("README.md has no Install section")
	}
	blocks := readmeBlocks(t)
	goInstall := findBlock(t, blocks, "go install "+string(module[1])+"/cmd/chronos@")
	if lines := commandLines(goInstall); len(lines) != 2 || lines[1] != "chronos version" {
		t.Errorf("README install block %q: want the go install line, then chronos version", lines)
	}
	// From a clone, the same build: make install.
	gobin := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	mk := exec.CommandContext(ctx, "make", "-s", "install")
	mk.Dir = repoRoot
	mk.Env = childEnv("GOBIN=" + gobin)
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("make install: %v\n%s", err, out)
	}
	out, err := exec.Command(filepath.Join(gobin, "chronos"), "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "chronos ") {
		t.Errorf("chronos version after make install into GOBIN: %v\n%s", err, out)
	}

	// make build, then the binary where the units run it.
	build := findBlock(t, blocks, "make build")
	var dest string
	for _, l := range commandLines(build) {
		if f := strings.Fields(l); len(f) >= 3 && slices.Contains(f, "install") && f[len(f)-2] == "bin/chronos" {
			dest = f[len(f)-1]
		}
	}
	if dest == "" {
		t.Fatalf("README's make build block installs no bin/chronos: %q", build.text)
	}
	units, err := filepath.Glob(filepath.Join(repoRoot, "deploy", "systemd", "*.service"))
	if err != nil || len(units) == 0 {
		t.Fatalf("no units in deploy/systemd (%v)", err)
	}
	for _, u := range units {
		for _, exec := range readUnit(t, u)["Service"]["ExecStart"] {
			if f := strings.Fields(exec); len(f) == 0 || f[0] != dest {
				t.Errorf("%s: ExecStart=%s does not run %s, where the README installs chronos", filepath.Base(u), exec, dest)
			}
		}
	}

	// NAS is spelled out the first time the README names it.
	first := regexp.MustCompile(`\bNAS\b`).FindIndex(readme)
	if first == nil {
		t.Fatal("README never names NAS")
	}
	if after := string(readme[first[1]:min(first[1]+80, len(readme))]); !strings.Contains(after, "Nous Account Service") {
		t.Errorf("the README's first NAS is not spelled out: %q", string(readme[first[0]:min(first[1]+80, len(readme))]))
	}
}

// secretRecipe matches a shell line that writes random bytes to a file.
var secretRecipe = regexp.MustCompile(`/dev/urandom.*>`)

// TestSecretRecipesArePrivate runs the README's recipe for NAS's secrets
// under a permissive umask (022, as most shells have) and checks that every
// file it writes is readable by its owner only; NAS started on those files
// logs no exposed secret, and once they are made readable by others it
// warns about each secret file it reads. Every other recipe of README.md
// and docs/ that writes random bytes to a file does so under umask 077.
func TestSecretRecipesArePrivate(t *testing.T) {
	t.Parallel()
	blocks := readmeBlocks(t)
	dir := t.TempDir()
	setup := findBlock(t, blocks, "chronos keys generate --out keys --activate")
	runScript(t, dir, "umask 022\n"+setup.text)
	var files int
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		files++
		if info.Mode().Perm()&0o077 != 0 {
			t.Errorf("the README's recipe leaves %s at mode %04o: group or others may read it", strings.TrimPrefix(p, dir+"/"), info.Mode().Perm())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 6 {
		t.Errorf("the recipe wrote %d files and directories; want the keys, relay-secrets, operator-token, agent-token, agents.yaml", files)
	}

	// NAS on those files: no warning; then each exposed file warned about.
	nasYAML := strings.NewReplacer("redis://127.0.0.1:6379/0", "memory").Replace(yamlFile(t, blocks, "nas.yaml"))
	writeFile(t, dir, "nas.yaml", nasYAML)
	startNAS := func() string {
		t.Helper()
		port, relayPort := freePort(t), freePort(t)
		env := []string{fmt.Sprintf("CHRONOS_NAS_LISTEN=127.0.0.1:%d", port), fmt.Sprintf("CHRONOS_NAS_RELAY_LISTEN=127.0.0.1:%d", relayPort)}
		p := startProc(t, "nas", dir, env, "nas", "--config", "nas.yaml")
		waitReady(t, p, fmt.Sprintf("http://127.0.0.1:%d/readyz", port), 30*time.Second)
		p.kill()
		return p.out.String()
	}
	const warning = "secret file is readable by group or others"
	if out := startNAS(); strings.Contains(out, warning) {
		t.Errorf("NAS on the recipe's files warns about an exposed secret:\n%s", out)
	}
	exposed := []string{"operator-token", "relay-secrets"}
	for _, f := range exposed {
		if err := os.Chmod(filepath.Join(dir, f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := startNAS()
	for _, f := range exposed {
		if !regexp.MustCompile(regexp.QuoteMeta(warning) + `[^\n]*"file":"` + regexp.QuoteMeta(f) + `","mode":"0644","fix":"chmod 600 ` + regexp.QuoteMeta(f) + `"`).MatchString(out) {
			t.Errorf("NAS does not warn that %s is exposed:\n%s", f, out)
		}
	}

	// Every recipe in the docs: umask 077 before the random bytes land.
	docs, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	inline := regexp.MustCompile("`([^`]+)`")
	for _, doc := range append(docs, filepath.Join(repoRoot, "README.md")) {
		f, err := os.Open(doc)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(doc, repoRoot+"/")
		sc := bufio.NewScanner(f)
		inBlock, umask := false, false
		for n := 1; sc.Scan(); n++ {
			line := sc.Text()
			if strings.HasPrefix(line, "```") {
				inBlock, umask = !inBlock, false
				continue
			}
			if inBlock {
				umask = umask || strings.Contains(line, "umask 077")
				if secretRecipe.MatchString(line) && !umask && !strings.Contains(line, "umask 077") {
					t.Errorf("%s:%d: a recipe writes a secret without umask 077: %s", name, n, line)
				}
				continue
			}
			for _, m := range inline.FindAllStringSubmatch(line, -1) {
				if secretRecipe.MatchString(m[1]) && !strings.Contains(m[1], "umask 077") {
					t.Errorf("%s:%d: a recipe writes a secret without umask 077: %s", name, n, m[1])
				}
			}
		}
		f.Close()
	}
}

// readUnit parses a systemd unit file: section, key, every value in order
// (continuation lines joined, comments left out).
func readUnit(t *testing.T, path string) map[string]map[string][]string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	unit := map[string]map[string][]string{}
	section := ""
	for _, line := range strings.Split(strings.ReplaceAll(string(data), "\\\n", " "), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = strings.Trim(line, "[]")
			if unit[section] == nil {
				unit[section] = map[string][]string{}
			}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s: %q is not a key=value line of a section", path, line)
			}
			unit[section][strings.TrimSpace(k)] = append(unit[section][strings.TrimSpace(k)], strings.TrimSpace(v))
		}
	}
	return unit
}

// sandboxWritable reports whether a process of a unit's [Service] may write
// path under its ProtectSystem=, ProtectHome= and ReadWritePaths= (the
// file-system view systemd gives it, before file permissions).
func sandboxWritable(svc map[string][]string, path string) bool {
	last := func(k string) string {
		if v := svc[k]; len(v) > 0 {
			return v[len(v)-1]
		}
		return "no"
	}
	under := func(p, dir string) bool { return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/") }
	for _, v := range svc["ReadWritePaths"] {
		for _, dir := range strings.Fields(v) {
			if under(path, strings.TrimPrefix(dir, "-")) {
				return true
			}
		}
	}
	if home := last("ProtectHome"); home != "no" && (under(path, "/home") || under(path, "/root") || under(path, "/run/user")) {
		return false
	}
	if under(path, "/tmp") || under(path, "/var/tmp") {
		return true // private with PrivateTmp, writable all the same
	}
	switch last("ProtectSystem") {
	case "strict":
		return under(path, "/dev") || under(path, "/proc") || under(path, "/sys")
	case "full":
		return !under(path, "/usr") && !under(path, "/boot") && !under(path, "/efi") && !under(path, "/etc")
	case "yes", "true":
		return !under(path, "/usr") && !under(path, "/boot") && !under(path, "/efi")
	}
	return true
}

// TestSystemdUnits checks deploy/systemd: a unit for NAS, the agent (with
// its socket) and chronos relay processes, each ExecStart naming commands
// and flags the binary has; the relay reads NAS's config and serves health
// on its instance's port; every service is hardened (NoNewPrivileges,
// ProtectSystem); and the agent's sandbox, which is its jobs', lets a job
// write outside the system directories (a backup to /srv) while /etc and
// /usr stay read-only, with ReadWritePaths= documented in the unit and in
// docs/agent.md for a stricter one.
func TestSystemdUnits(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(repoRoot, "deploy", "systemd")
	units := map[string]map[string]map[string][]string{}
	for _, name := range []string{"chronos-agent.socket", "chronos-agent.service", "chronos-nas.service", "chronos-relay@.service"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("deploy/systemd has no %s", name)
			continue
		}
		units[name] = readUnit(t, filepath.Join(dir, name))
	}
	configOf := map[string]string{}
	for name, u := range units {
		if !strings.HasSuffix(name, ".service") {
			continue
		}
		svc := u["Service"]
		if len(svc["ExecStart"]) != 1 {
			t.Errorf("%s: ExecStart %q, want one", name, svc["ExecStart"])
			continue
		}
		argv := strings.Fields(strings.ReplaceAll(svc["ExecStart"][0], "%i", "8082"))
		path, flags := chronosArgs(argv[1:])
		known := helpFlags(t, path)
		for _, f := range flags {
			if !slices.Contains(known, f) {
				t.Errorf("%s: chronos %s has no flag %s", name, strings.Join(path, " "), f)
			}
		}
		if i := slices.Index(argv, "--config"); i >= 0 && i+1 < len(argv) {
			configOf[strings.Join(path, " ")] = argv[i+1]
		}
		for k, want := range map[string]string{"NoNewPrivileges": "yes", "Type": "notify", "NotifyAccess": "main"} {
			if v := svc[k]; len(v) != 1 || v[0] != want {
				t.Errorf("%s: %s=%q, want %s", name, k, v, want)
			}
		}
		if len(svc["ProtectSystem"]) == 0 || len(svc["WatchdogSec"]) == 0 {
			t.Errorf("%s: no ProtectSystem= or no WatchdogSec=", name)
		}
	}
	if relay := units["chronos-relay@.service"]; relay != nil {
		exec := strings.Join(relay["Service"]["ExecStart"], " ")
		if !strings.Contains(exec, " relay ") || !strings.Contains(exec, "--listen 127.0.0.1:%i") {
			t.Errorf("chronos-relay@.service: ExecStart=%s, want chronos relay with --listen 127.0.0.1:%%i", exec)
		}
		if configOf["relay"] != configOf["nas"] || configOf["nas"] == "" {
			t.Errorf("the relay unit reads %q, NAS's %q: want NAS's config", configOf["relay"], configOf["nas"])
		}
		if u := relay["Service"]["User"]; len(u) != 1 || u[0] != units["chronos-nas.service"]["Service"]["User"][0] {
			t.Errorf("the relay unit runs as %q, not as NAS's user (it reads NAS's secret files)", u)
		}
	}

	// The agent's sandbox is its jobs'.
	agent := units["chronos-agent.service"]
	if agent == nil {
		return
	}
	svc := agent["Service"]
	for _, p := range []string{"/var/lib/chronos/runs", "/srv/backups", "/var/backups", "/opt/data"} {
		if !sandboxWritable(svc, p) {
			t.Errorf("chronos-agent.service: a job cannot write %s (ProtectSystem=%q ReadWritePaths=%q)", p, svc["ProtectSystem"], svc["ReadWritePaths"])
		}
	}
	for _, p := range []string{"/etc/chronos/agent.yaml", "/usr/local/bin/chronos", "/home/someone/.ssh/authorized_keys"} {
		if sandboxWritable(svc, p) {
			t.Errorf("chronos-agent.service: a job may write %s", p)
		}
	}
	raw, err := os.ReadFile(filepath.Join(dir, "chronos-agent.service"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"#   ProtectSystem=strict", "#   ReadWritePaths=/var/lib/chronos ", "systemctl edit chronos-agent.service", "docs/agent.md"} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("chronos-agent.service does not document the jobs' sandbox: no %q", want)
		}
	}
	doc, err := os.ReadFile(filepath.Join(repoRoot, "docs", "agent.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?s)### The sandbox of the jobs\n.*ReadWritePaths=/var/lib/chronos /srv/backups`).Match(doc) {
		t.Error("docs/agent.md has no section on the jobs' sandbox with a ReadWritePaths= drop-in")
	}
}
