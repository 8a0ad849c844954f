//go:build !linux

package redistest

import "syscall"

// sysProcAttr puts the server in its own process group; outside Linux only
// the explicit shutdown stops it.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
