package runner

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/chronoscron/chronos/agent/internal/procfs"
)

// ShellRunner runs shell payloads as a child process in its own process
// group, and follows the run's processes while it runs (see Tree): the
// group, every process whose environment names the run, and their
// descendants, so a grandchild that left the group with setsid is still
// known. When the run's context ends (timeout, replace, shutdown) all of
// them are killed. The long-lived ones are reported through
// Request.Processes for the caller to record.
type ShellRunner struct {
	// WaitDelay bounds how long Run waits for output after the process group
	// was killed or the main process exited (default 2 s).
	WaitDelay time.Duration
	// TrackInterval is how often the run's processes are looked for
	// (default 500 ms).
	TrackInterval time.Duration
	// KillTimeout bounds how long a kill waits for the run's processes to
	// be gone (default 5 s).
	KillTimeout time.Duration
	// TermGrace is how long a run cancelled on request (its context's
	// cause is ErrCancelled) has after SIGTERM to its process group before
	// everything of the run is killed (default 2 s).
	TermGrace time.Duration
}

// ErrCancelled, as the cause of a run's context, asks for a graceful stop:
// the shell runner sends SIGTERM to the run's process group and kills what
// is left after TermGrace. Any other cause kills at once.
var ErrCancelled = errors.New("cancelled on request")

func (s *ShellRunner) termGrace() time.Duration {
	if s.TermGrace > 0 {
		return s.TermGrace
	}
	return 2 * time.Second
}

// stop ends the run whose context ended: SIGTERM first and a grace period
// when it was cancelled on request, then a kill of all its processes.
func (s *ShellRunner) stop(ctx context.Context, done <-chan struct{}, root Process, tree *Tree) {
	if errors.Is(context.Cause(ctx), ErrCancelled) && syscall.Kill(-root.PID, syscall.SIGTERM) == nil {
		t := time.NewTimer(s.termGrace())
		select {
		case <-done:
		case <-t.C:
		}
		t.Stop()
	}
	// The whole process group and every process of the run, the ones that
	// left the group included.
	kctx, cancel := context.WithTimeout(context.Background(), s.killTimeout())
	_, _ = tree.Kill(kctx)
	cancel()
}

var _ Runner = (*ShellRunner)(nil)

// Validate checks that exactly one of command or argv is set.
func (s *ShellRunner) Validate(p Payload) error {
	if p.Shell == nil {
		return errors.New("shell: payload has no shell fields")
	}
	hasCmd := strings.TrimSpace(p.Shell.Command) != ""
	hasArgv := len(p.Shell.Argv) > 0
	switch {
	case hasCmd && hasArgv:
		return errors.New("shell: set either command or argv, not both")
	case !hasCmd && !hasArgv:
		return errors.New("shell: command is empty")
	case hasArgv && p.Shell.Argv[0] == "":
		return errors.New("shell: argv[0] is empty")
	}
	for k := range p.Shell.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return fmt.Errorf("shell: bad environment name %q", k)
		}
	}
	return nil
}

func (s *ShellRunner) trackInterval() time.Duration {
	if s.TrackInterval > 0 {
		return s.TrackInterval
	}
	return 500 * time.Millisecond
}

func (s *ShellRunner) killTimeout() time.Duration {
	if s.KillTimeout > 0 {
		return s.KillTimeout
	}
	return 5 * time.Second
}

// track scans the run's processes until done and reports the long-lived
// ones whenever one is new.
func (s *ShellRunner) track(done <-chan struct{}, tree *Tree, report func([]Process)) {
	t := time.NewTicker(s.trackInterval())
	defer t.Stop()
	reported := map[Process]bool{}
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		if _, err := tree.Scan(); err != nil {
			continue
		}
		stable := tree.Stable()
		fresh := false
		for _, p := range stable {
			if !reported[p] {
				reported[p] = true
				fresh = true
			}
		}
		if fresh && report != nil {
			report(stable)
		}
	}
}

// Run executes the payload and waits for it. The environment gets
// CHRONOS_JOB_ID, CHRONOS_RUN_ID, CHRONOS_FIRE_AT and CHRONOS_ATTEMPT, and
// the request's Env after the payload's own variables.
func (s *ShellRunner) Run(ctx context.Context, req Request) Result {
	if err := s.Validate(req.Payload); err != nil {
		return Result{Err: err}
	}
	sh := req.Payload.Shell
	var cmd *exec.Cmd
	if sh.Command != "" {
		cmd = exec.Command("/bin/sh", "-c", sh.Command)
	} else {
		cmd = exec.Command(sh.Argv[0], sh.Argv[1:]...)
	}
	cmd.Dir = sh.Dir
	env := os.Environ()
	for k, v := range sh.Env {
		env = append(env, k+"="+v)
	}
	for _, k := range slices.Sorted(maps.Keys(req.Env)) {
		env = append(env, k+"="+req.Env[k])
	}
	env = append(env,
		"CHRONOS_JOB_ID="+req.JobID,
		EnvRunID+"="+req.RunID,
		"CHRONOS_FIRE_AT="+req.FireAt.UTC().Format(time.RFC3339),
		fmt.Sprintf("CHRONOS_ATTEMPT=%d", req.Attempt),
	)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = req.Output, req.Output
	if req.Stderr != nil {
		cmd.Stderr = req.Stderr
	}
	cmd.SysProcAttr = procAttr()
	cmd.WaitDelay = s.WaitDelay
	if cmd.WaitDelay <= 0 {
		cmd.WaitDelay = 2 * time.Second
	}
	if err := cmd.Start(); err != nil {
		return Result{Err: fmt.Errorf("shell: start: %w", err), ExitCode: -1}
	}
	// The child is not waited for until cmd.Wait below, so its pid is not
	// reused meanwhile; its start time makes the record usable later.
	root := Process{PID: cmd.Process.Pid}
	root.Start, _ = procfs.StartTime(root.PID)
	tree := newChildTree(req.RunID, root)
	if req.Processes != nil {
		req.Processes([]Process{root})
	}
	done := make(chan struct{})
	var (
		wg     sync.WaitGroup
		killed atomic.Bool
	)
	wg.Go(func() { s.track(done, tree, req.Processes) })
	wg.Go(func() {
		select {
		case <-ctx.Done():
			killed.Store(true)
			s.stop(ctx, done, root, tree)
		case <-done:
		}
	})
	err := cmd.Wait()
	close(done)
	wg.Wait()
	if killed.Load() {
		return Result{Err: fmt.Errorf("shell: killed: %w", context.Cause(ctx)), ExitCode: -1}
	}
	if err != nil {
		code := -1
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
			return Result{Err: fmt.Errorf("shell: exit status %d", code), ExitCode: code}
		}
		return Result{Err: fmt.Errorf("shell: %w", err), ExitCode: code}
	}
	return Result{}
}
