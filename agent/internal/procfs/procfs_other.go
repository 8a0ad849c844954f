//go:build !linux

package procfs

// Supported reports whether /proc can be read here: never on this system.
func Supported() bool { return false }

// Read answers ErrUnsupported.
func Read(int) (Stat, error) { return Stat{}, ErrUnsupported }

// StartTime answers ErrUnsupported.
func StartTime(int) (uint64, error) { return 0, ErrUnsupported }

// All answers ErrUnsupported.
func All() ([]Stat, error) { return nil, ErrUnsupported }

// HasEnv cannot read environments here: false.
func HasEnv(int, string) bool { return false }

// BootID is unknown here: "".
func BootID() string { return "" }

// PIDNamespace is unknown here: "".
func PIDNamespace() string { return "" }
