//go:build !linux

package postgrese2e

import "syscall"

// sysProcAttr: outside Linux, children are stopped by the test's cleanups.
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }
