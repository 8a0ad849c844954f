//go:build !linux

package hermese2e

import "syscall"

// childAttr returns no special attributes where Pdeathsig does not exist;
// t.Cleanup still kills every child.
func childAttr() *syscall.SysProcAttr { return nil }
