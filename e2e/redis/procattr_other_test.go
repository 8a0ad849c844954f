//go:build !linux

package redise2e

import "syscall"

// sysProcAttr: outside Linux, children are stopped by the test's cleanups.
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }
