package e2e

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// requireImage reports whether CHRONOS_REQUIRE_IMAGE=1: the image test
// must build and run the image, and fails where it would skip. `make test`
// sets it where podman is installed and the tests run as root.
func requireImage() bool { return os.Getenv("CHRONOS_REQUIRE_IMAGE") == "1" }

// cannotImage ends the image test on a host that cannot build or run the
// image: a skip saying why, plainly, or a failure under
// CHRONOS_REQUIRE_IMAGE=1.
func cannotImage(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...) + " (see docs/operations.md, \"Building the image here\")"
	if requireImage() {
		t.Fatalf("CHRONOS_REQUIRE_IMAGE=1, but the image cannot be built and run here: %s", msg)
	}
	t.Skipf("IMAGE TEST SKIPPED, nothing was checked: %s", msg)
}

// containerCmd runs a podman or buildah command within a bounded time and
// returns its combined output.
func containerCmd(t *testing.T, within time.Duration, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = childEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	return string(out), nil
}

// runtimeArgs are the podman flags that let a container start on a nested
// host: runc, where installed (crun refuses hosts with cgroups in hybrid
// mode), and resource limits within the host's own (a runtime cannot raise
// them without CAP_SYS_RESOURCE, and podman's defaults are above them).
func runtimeArgs() (global, run []string) {
	if rt := os.Getenv("CHRONOS_TEST_OCI_RUNTIME"); rt != "" {
		global = []string{"--runtime", rt}
	} else if _, err := exec.LookPath("runc"); err == nil {
		global = []string{"--runtime", "runc"}
	}
	return global, []string{"--ulimit", "nofile=4096:4096", "--ulimit", "nproc=1024:1024"}
}

// TestImageRunsNAS builds the container image offline with `make image`
// (a FROM scratch image of a static binary built here; no base image is
// pulled) using podman, or buildah when only it is installed, and runs NAS
// in it as the image's non-root user with a read-only root file system,
// every capability dropped and no new privileges: /healthz answers on the
// published port, `chronos healthcheck` inside the container exits 0 on
// /readyz and 1 on a 404, and the process has uid 65532 and no capability.
// Where neither tool is installed or the host cannot run a container, it
// says so in its skip (a failure with CHRONOS_REQUIRE_IMAGE=1).
func TestImageRunsNAS(t *testing.T) {
	t.Parallel()
	builder := ""
	for _, b := range []string{"podman", "buildah"} {
		if _, err := exec.LookPath(b); err == nil {
			builder = b
			break
		}
	}
	if builder == "" {
		cannotImage(t, "neither podman nor buildah is installed (make deps installs podman and runc as root: apt-get install podman runc)")
	}
	tag := fmt.Sprintf("localhost/chronos-e2e:%d-%d", os.Getpid(), time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	mk := exec.CommandContext(ctx, "make", "-s", "image", "IMAGE="+tag, "CONTAINER_BUILDER="+builder, "IMAGE_CONTEXT="+filepath.Join(t.TempDir(), "image"))
	mk.Dir = repoRoot
	mk.Env = childEnv()
	out, err := mk.CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "go build") || strings.Contains(string(out), ".go:") {
			t.Fatalf("make image: %v\n%s", err, tail(string(out), 4000))
		}
		cannotImage(t, "%s cannot build images here: make image: %v\n%s", builder, err, tail(string(out), 2000))
	}
	t.Cleanup(func() { _, _ = containerCmd(t, time.Minute, builder, "rmi", "-f", tag) })
	if builder != "podman" {
		cannotImage(t, "the image was built with buildah, but running NAS in it needs podman (apt-get install podman runc)")
	}

	global, limits := runtimeArgs()
	if out, err := containerCmd(t, 2*time.Minute, "podman", append(append(append(global, "run", "--rm"), limits...), tag, "version")...); err != nil || !strings.Contains(out, "chronos ") {
		cannotImage(t, "podman built the image but cannot run a container on this host (nested hosts need runc and limits within the host's, see the flags used): %v\n%s", err, tail(out, 2000))
	}

	// NAS, configured by its environment, with an agents file mounted
	// read-only and owned by the image's user.
	conf := t.TempDir()
	writeFile(t, conf, "agents.yaml", "- agent_id: image-agent\n  instance_id: image\n  token_sha256: "+strings.Repeat("ab", 32)+"\n")
	if err := os.Chmod(filepath.Join(conf, "agents.yaml"), 0o600); err != nil {
		t.Fatal(err)
	}
	if os.Getuid() == 0 {
		if err := os.Chown(filepath.Join(conf, "agents.yaml"), 65532, 65532); err != nil {
			t.Fatal(err)
		}
	} else if err := os.Chmod(filepath.Join(conf, "agents.yaml"), 0o644); err != nil {
		t.Fatal(err)
	}
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	port := freePort(t)
	name := strings.NewReplacer("localhost/", "", ":", "-").Replace(tag)
	args := append(append(global, "run", "-d", "--name", name,
		"--read-only", "--tmpfs", "/tmp", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
		"-p", fmt.Sprintf("127.0.0.1:%d:8080", port), "-v", conf+":/etc/chronos:ro",
		"-e", "CHRONOS_NAS_LISTEN=:8080", "-e", "CHRONOS_NAS_PUBLIC_URL=http://127.0.0.1:8080",
		"-e", "CHRONOS_NAS_RELAY_SECRETS=whsec_"+base64.StdEncoding.EncodeToString(secret),
		"-e", "CHRONOS_NAS_AGENTS_FILE=/etc/chronos/agents.yaml"), limits...)
	if out, err := containerCmd(t, 2*time.Minute, "podman", append(args, tag, "nas")...); err != nil {
		t.Fatalf("podman run NAS: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := containerCmd(t, time.Minute, "podman", "logs", name)
			t.Logf("---- NAS's log in the container:\n%s", tail(logs, 4000))
		}
		_, _ = containerCmd(t, time.Minute, "podman", append(global, "rm", "-f", name)...)
	})

	healthz := fmt.Sprintf("http://127.0.0.1:%d/healthz", port)
	eventually(t, time.Minute, "NAS in the container to answer /healthz", func() (bool, string) {
		resp, err := http.Get(healthz)
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == http.StatusOK && strings.Contains(string(body), `"ok"`), fmt.Sprintf("%d %s", resp.StatusCode, body)
	})

	// The image's own probe, inside the container.
	if out, err := containerCmd(t, time.Minute, "podman", append(global, "exec", name, "/usr/local/bin/chronos", "healthcheck", "http://127.0.0.1:8080/readyz")...); err != nil || !strings.Contains(out, "200 OK") {
		t.Errorf("chronos healthcheck of /readyz in the container: %v\n%s", err, out)
	}
	notFound, err := containerCmd(t, time.Minute, "podman", append(global, "exec", name, "/usr/local/bin/chronos", "healthcheck", "http://127.0.0.1:8080/no-such-route")...)
	if code, ok := errorsAsExit(err); !ok || code != 1 || !strings.Contains(notFound, "404") {
		t.Errorf("chronos healthcheck of a 404: %v (want exit 1)\n%s", err, notFound)
	}

	// Read-only, non-root, no capability: as podman set it up and as the
	// kernel sees the process.
	insp, err := containerCmd(t, time.Minute, "podman", append(global, "inspect", "-f", "{{.HostConfig.ReadonlyRootfs}} {{.Config.User}} {{.State.Pid}}", name)...)
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(insp)
	if len(f) != 3 || f[0] != "true" || f[1] != "65532:65532" {
		t.Errorf("podman inspect: %q, want a read-only root file system and user 65532:65532", insp)
	}
	if len(f) == 3 {
		status, err := os.ReadFile("/proc/" + f[2] + "/status")
		if err != nil {
			t.Fatalf("the NAS process: %v", err)
		}
		for _, want := range []string{"Uid:\t65532\t65532\t65532\t65532", "CapEff:\t0000000000000000"} {
			if !strings.Contains(string(status), want) {
				t.Errorf("NAS's process status has no %q:\n%s", want, status)
			}
		}
	}
}

// errorsAsExit returns the exit code a command's error carries.
func errorsAsExit(err error) (int, bool) {
	if err == nil {
		return 0, true
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), true
	}
	return 0, false
}

// TestImageDockerfileMatchesRuntimeStage checks deploy/image/Dockerfile,
// the offline build of `make image`, against the multi-stage Dockerfile's
// runtime stage: one FROM scratch stage with the same user, environment,
// volume, ports, working directory and entrypoint, the user's directories
// owned by it, and the Makefile writing the same passwd entry. No stage of
// either runs a second program for its healthcheck.
func TestImageDockerfileMatchesRuntimeStage(t *testing.T) {
	t.Parallel()
	_, stages := readDockerfile(t)
	runtime := stages[len(stages)-1]
	_, offline := readDockerfileAt(t, filepath.Join("deploy", "image", "Dockerfile"))
	if len(offline) != 1 || offline[0].from != "scratch" {
		t.Fatalf("deploy/image/Dockerfile: %d stages, first FROM %v; want one FROM scratch", len(offline), offline)
	}
	img := offline[0]
	for _, instr := range []string{"USER", "ENV", "VOLUME", "EXPOSE", "WORKDIR", "ENTRYPOINT", "CMD"} {
		if got, want := img.all(instr), runtime.all(instr); strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s: deploy/image/Dockerfile has %q, the runtime stage %q", instr, got, want)
		}
	}
	copies := img.all("COPY")
	for _, want := range []string{"rootfs/ /", "--chown=65532:65532 rootfs/var/lib/chronos /var/lib/chronos", "--chown=65532:65532 rootfs/etc/chronos /etc/chronos"} {
		if !slices.Contains(copies, want) {
			t.Errorf("deploy/image/Dockerfile does not COPY %s: %q", want, copies)
		}
	}
	mk, err := os.ReadFile(filepath.Join(repoRoot, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"echo 'chronos:x:65532:65532:chronos:/var/lib/chronos:/sbin/nologin' > $(IMAGE_CONTEXT)/rootfs/etc/passwd",
		"CGO_ENABLED=0", "-f deploy/image/Dockerfile",
		"/lib/time/zoneinfo.zip\" $(IMAGE_CONTEXT)/rootfs/usr/local/share/zoneinfo.zip",
		"$(IMAGE_CONTEXT)/rootfs/etc/ssl/certs/ca-certificates.crt",
		"chmod 0700 $(IMAGE_CONTEXT)/rootfs/var/lib/chronos", "chmod 1777 $(IMAGE_CONTEXT)/rootfs/tmp",
	} {
		if !strings.Contains(string(mk), want) {
			t.Errorf("the Makefile's image-context does not have %q", want)
		}
	}
}
