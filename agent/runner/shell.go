package runner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// ShellRunner runs shell payloads as a child process in its own process
// group. When the run's context ends (timeout, replace, shutdown) the whole
// group is killed, so grandchildren die with it.
type ShellRunner struct {
	// WaitDelay bounds how long Run waits for output after the process group
	// was killed or the main process exited (default 2 s).
	WaitDelay time.Duration
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

// Run executes the payload and waits for it. The environment gets
// CHRONOS_JOB_ID, CHRONOS_RUN_ID, CHRONOS_FIRE_AT and CHRONOS_ATTEMPT.
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
	env = append(env,
		"CHRONOS_JOB_ID="+req.JobID,
		"CHRONOS_RUN_ID="+req.RunID,
		"CHRONOS_FIRE_AT="+req.FireAt.UTC().Format(time.RFC3339),
		fmt.Sprintf("CHRONOS_ATTEMPT=%d", req.Attempt),
	)
	cmd.Env = env
	cmd.Stdout = req.Output
	cmd.Stderr = req.Output
	cmd.SysProcAttr = procAttr()
	cmd.WaitDelay = s.WaitDelay
	if cmd.WaitDelay <= 0 {
		cmd.WaitDelay = 2 * time.Second
	}
	if err := cmd.Start(); err != nil {
		return Result{Err: fmt.Errorf("shell: start: %w", err), ExitCode: -1}
	}
	done := make(chan struct{})
	killed := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			// Negative pid: the whole process group.
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			close(killed)
		case <-done:
		}
	}()
	err := cmd.Wait()
	close(done)
	select {
	case <-killed:
		return Result{Err: fmt.Errorf("shell: killed: %w", context.Cause(ctx)), ExitCode: -1}
	default:
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
