// Package procfs reads what the agent needs to know about processes on this
// host: a process's parent, group and start time, the boot it belongs to,
// and whether its environment names a run. A pid alone is not an identity
// (pids are reused); a pid with its start time, within one boot, is.
//
// Only Linux has /proc; elsewhere every reader answers ErrUnsupported and
// callers fall back to what a pid alone can tell.
package procfs
