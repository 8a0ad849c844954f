//go:build linux

package hermese2e

import "syscall"

// childAttr ties a child process to the test process: if the test binary
// dies, the kernel kills the child.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
