//go:build !linux

package store

import "os"

// datasync makes f's data durable (fsync where fdatasync is not offered).
func datasync(f *os.File) error { return f.Sync() }
