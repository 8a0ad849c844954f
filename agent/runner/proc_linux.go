package runner

import "syscall"

// procAttr puts the child in its own process group and asks the kernel to
// kill it if the agent dies, so an owner killed mid-run does not leave the
// command running on its own.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
