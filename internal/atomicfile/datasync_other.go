//go:build !linux

package atomicfile

import "os"

// DataSync makes f's data durable (an fsync where fdatasync is not
// offered).
func DataSync(f *os.File) error { return f.Sync() }
