//go:build linux

package redistest

import "syscall"

// sysProcAttr kills the server when the test process that started it dies,
// whatever way it dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}
