package atomicfile

import (
	"os"
	"syscall"
)

// DataSync makes f's data durable, with what of its metadata reading the
// data back needs (its size), but not its times: fdatasync. An appended
// file needs no more.
func DataSync(f *os.File) error {
	return syscall.Fdatasync(int(f.Fd()))
}
