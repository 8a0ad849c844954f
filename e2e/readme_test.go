package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// mdBlock is one fenced code block of a Markdown file.
type mdBlock struct {
	lang, text string
	line       int
}

// readmeBlocks returns the fenced code blocks of README.md.
func readmeBlocks(t *testing.T) []mdBlock {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var blocks []mdBlock
	var cur *mdBlock
	for i, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "```") {
			if cur == nil {
				cur = &mdBlock{lang: strings.TrimSpace(strings.TrimPrefix(line, "```")), line: i + 1}
			} else {
				blocks = append(blocks, *cur)
				cur = nil
			}
			continue
		}
		if cur != nil {
			cur.text += line + "\n"
		}
	}
	if cur != nil {
		t.Fatalf("README.md: unclosed code block at line %d", cur.line)
	}
	return blocks
}

// yamlFile returns the README's YAML block whose first line is "# name".
func yamlFile(t *testing.T, blocks []mdBlock, name string) string {
	t.Helper()
	for _, b := range blocks {
		if b.lang == "yaml" && strings.HasPrefix(b.text, "# "+name+"\n") {
			return b.text
		}
	}
	t.Fatalf("README.md has no yaml block starting with # %s", name)
	return ""
}

// commandLines returns the non-comment lines of a shell block.
func commandLines(b mdBlock) []string {
	var out []string
	for _, l := range strings.Split(b.text, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		out = append(out, l)
	}
	return out
}

// daemonLine matches the README commands that start a long-running process
// (not their subcommands, such as chronos nas unarmed).
var daemonLine = regexp.MustCompile(`^chronos (nas|relay|agent serve) --`)

// TestReadmeNASConfigTableMatchesTheCode checks the README's NAS
// configuration reference against the keys and defaults the real loader
// prints (chronos nas --print-config): every key documented, no key that
// does not exist, and every default stated in backticks equal to the code's.
func TestReadmeNASConfigTableMatchesTheCode(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "### NAS configuration reference")
	if !ok {
		t.Fatal("README.md has no NAS configuration reference")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	row := regexp.MustCompile("(?m)^\\| `([a-z_.]+)` \\| ([^|]+) \\|")
	documented := map[string]string{}
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		documented[m[1]] = strings.TrimSpace(m[2])
	}

	dir := t.TempDir()
	env := []string{
		"CHRONOS_NAS_PUBLIC_URL=http://127.0.0.1:1",
		"CHRONOS_NAS_RELAY_SECRETS=whsec_" + strings.Repeat("A", 44),
		"CHRONOS_NAS_AGENTS_FILE=agents.yaml",
	}
	out := mustChronos(t, dir, env, "nas", "--print-config")
	var root yaml.Node
	if err := yaml.Unmarshal([]byte(out), &root); err != nil {
		t.Fatalf("print-config output is not YAML: %v\n%s", err, out)
	}
	actual := map[string]string{}
	var walk func(n *yaml.Node, prefix string)
	walk = func(n *yaml.Node, prefix string) {
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if v.Kind == yaml.MappingNode {
				walk(v, prefix+k.Value+".")
				continue
			}
			val := v.Value
			if v.Kind == yaml.SequenceNode {
				val = "[]"
			}
			actual[prefix+k.Value] = val
		}
	}
	walk(root.Content[0], "")

	for k := range actual {
		if _, ok := documented[k]; !ok {
			t.Errorf("README: NAS config key %s is not documented", k)
		}
	}
	for k, def := range documented {
		got, ok := actual[k]
		if !ok {
			t.Errorf("README documents NAS config key %s, which the code does not have", k)
			continue
		}
		if strings.HasPrefix(def, "`") && strings.HasSuffix(def, "`") {
			if want := strings.Trim(def, "`"); got != want {
				t.Errorf("README: %s defaults to %s, the code says %q", k, def, got)
			}
		}
	}
	if len(documented) < 20 {
		t.Errorf("README documents only %d NAS keys; the table was not parsed", len(documented))
	}
}

// TestReadmeConfigBlocksLoad loads the README's nas.yaml with the real NAS
// loader (strict: an unknown key fails) after making the files it names with
// the README's own commands.
func TestReadmeConfigBlocksLoad(t *testing.T) {
	t.Parallel()
	blocks := readmeBlocks(t)
	dir := t.TempDir()
	setup := findBlock(t, blocks, "chronos keys generate --out keys --activate")
	runScript(t, dir, setup.text)
	writeFile(t, dir, "nas.yaml", yamlFile(t, blocks, "nas.yaml"))
	out := mustChronos(t, dir, nil, "nas", "--config", "nas.yaml", "--print-config")
	if !strings.Contains(out, "dispatchers: 0") {
		t.Errorf("nas.yaml's relay.dispatchers did not load:\n%s", out)
	}
	if strings.Contains(out, "secrets: []") {
		t.Errorf("relay.secrets_file was not read:\n%s", out)
	}
}

// findBlock returns the shell block that contains line.
func findBlock(t *testing.T, blocks []mdBlock, line string) mdBlock {
	t.Helper()
	for _, b := range blocks {
		if b.lang == "sh" && strings.Contains(b.text, line) {
			return b
		}
	}
	t.Fatalf("README.md has no sh block with %q", line)
	return mdBlock{}
}

// runScript runs a README shell block with bash (-e, pipefail) in dir with
// the built binary first on PATH, and returns its stdout.
func runScript(t *testing.T, dir, script string, env ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = dir
	cmd.Env = childEnv(append([]string{"PATH=" + filepath.Dir(bin) + string(os.PathListSeparator) + os.Getenv("PATH")}, env...)...)
	cmd.SysProcAttr = childAttr()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("README script failed: %v\nscript:\n%s\nstdout:\n%s\nstderr:\n%s", err, script, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// TestReadmeMakeDemo runs the README's first quick-start command, make demo,
// for a few seconds.
func TestReadmeMakeDemo(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "make", "-s", "demo", "DEMOFLAGS=--for 6s")
	cmd.Dir = repoRoot
	cmd.Env = childEnv()
	cmd.SysProcAttr = childAttr()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make demo: %v\n%s", err, out)
	}
	if !regexp.MustCompile(`(?m)^\s*\+[0-4]\.\d{3}s  tick\s+ran\s+succeeded`).Match(out) {
		t.Errorf("make demo showed no run within 5 s:\n%s", out)
	}
	if !bytes.Contains(out, []byte("Summary after")) {
		t.Errorf("make demo printed no summary:\n%s", out)
	}
}

// TestReadmeLinksResolve checks that every relative link of the README and of
// the docs it owns points at a file or directory of the repository.
func TestReadmeLinksResolve(t *testing.T) {
	t.Parallel()
	link := regexp.MustCompile(`\]\(([^)#:]+)(#[^)]*)?\)`)
	for _, doc := range []string{"README.md", "docs/states.md", "docs/operations.md", "docs/hermes.md"} {
		data, err := os.ReadFile(filepath.Join(repoRoot, doc))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(data), -1) {
			target := filepath.Join(repoRoot, filepath.Dir(doc), m[1])
			if _, err := os.Stat(target); err != nil {
				t.Errorf("%s links to %s, which does not exist", doc, m[1])
			}
		}
	}
}
