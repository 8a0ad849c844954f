package store

import (
	"os"
	"syscall"
)

// datasync makes f's data durable, and of its metadata what reading the
// data back needs (its size): fdatasync.
func datasync(f *os.File) error {
	return syscall.Fdatasync(int(f.Fd()))
}
