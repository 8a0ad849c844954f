package cmdline

import (
	"fmt"
	"io"
	"os"
	"runtime/pprof"
)

// IsTerminal reports whether w is a character device such as a terminal.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// StartCPUProfile writes a CPU profile of the process to the file path until
// the returned stop is called.
func StartCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("cpuprofile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}, nil
}

// StartAllocProfile creates the file path at once (so a bad path fails
// before any work) and returns write, which writes the allocations the
// process made until then (the "allocs" profile: what was allocated,
// sampled, and where) to it and closes it.
func StartAllocProfile(path string) (write func() error, err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("memprofile: %w", err)
	}
	return func() error {
		if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
			_ = f.Close()
			return fmt.Errorf("memprofile: %w", err)
		}
		if err := f.Close(); err != nil {
			return fmt.Errorf("memprofile: %w", err)
		}
		return nil
	}, nil
}
