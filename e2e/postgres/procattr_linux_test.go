//go:build linux

package postgrese2e

import "syscall"

// sysProcAttr kills a child process when the test process dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
