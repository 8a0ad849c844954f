//go:build linux && (amd64 || arm || arm64 || loong64 || mips64 || mips64le || riscv64)

package pgtest

import (
	"encoding/binary"
	"syscall"
	"unsafe"
)

const (
	ipcRMID = 0
	ipcStat = 2
)

// shmSupported tells whether shmKeyOf and removeShm work here.
const shmSupported = true

// shmKeyOf returns the key of the System V shared memory segment id, and
// whether the segment exists. The key is the first field of the segment's
// ipc_perm on every architecture.
func shmKeyOf(id int) (int, bool) {
	var buf [512]byte // larger than any shmid_ds
	_, _, errno := syscall.Syscall(syscall.SYS_SHMCTL, uintptr(id), ipcStat, uintptr(unsafe.Pointer(&buf[0])))
	if errno != 0 {
		return 0, false
	}
	return int(int32(binary.NativeEndian.Uint32(buf[:4]))), true
}

// removeShm removes the System V shared memory segment a dead postmaster
// left (PostgreSQL keeps a small one to detect orphaned backends), when the
// segment id still has the key the postmaster recorded: ids are reused.
func removeShm(key, id int) {
	if k, ok := shmKeyOf(id); !ok || k != key {
		return
	}
	_, _, _ = syscall.Syscall(syscall.SYS_SHMCTL, uintptr(id), ipcRMID, 0)
}
