//go:build !linux

package pgtest

import (
	"errors"
	"syscall"
)

// sysProcAttr runs a tool as cred (nil: as this process) in its own process
// group. Outside Linux nothing kills the cluster with the test binary: only
// Main's shutdown stops it, and the sweep removes what a killed binary left
// once the postmaster is gone.
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred, Setpgid: true}
}

// processStart reports whether a process pid exists; its start time is not
// known here.
func processStart(pid int) (string, bool) {
	err := syscall.Kill(pid, 0)
	return "", err == nil || errors.Is(err, syscall.EPERM)
}

// postmasterIn cannot tell a live process for the postmaster of data here.
func postmasterIn(pid int, data string) postmasterState {
	if _, alive := processStart(pid); !alive {
		return postmasterGone
	}
	return postmasterUnknown
}

// childPids cannot list a process's children here.
func childPids(pid int) ([]int, error) {
	return nil, errors.New("pgtest: listing a process's children needs Linux")
}
