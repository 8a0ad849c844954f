package procfs

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Supported reports whether /proc can be read here.
func Supported() bool {
	_, err := os.Stat("/proc/self/stat")
	return err == nil
}

// Read returns the stat of pid; fs.ErrNotExist when there is no such
// process.
func Read(pid int) (Stat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
			return Stat{}, fs.ErrNotExist
		}
		return Stat{}, fmt.Errorf("procfs: %w", err)
	}
	return parseStat(b)
}

// parseStat decodes /proc/<pid>/stat: "pid (comm) state ppid pgrp session
// … starttime …", where comm may hold spaces and parentheses, so fields are
// counted from the last ')'.
func parseStat(b []byte) (Stat, error) {
	open := bytes.IndexByte(b, '(')
	end := bytes.LastIndexByte(b, ')')
	if open < 1 || end < open {
		return Stat{}, fmt.Errorf("procfs: malformed stat %q", b)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b[:open])))
	if err != nil {
		return Stat{}, fmt.Errorf("procfs: malformed stat pid: %w", err)
	}
	f := strings.Fields(string(b[end+1:]))
	// f[0] is field 3 (state); starttime is field 22.
	if len(f) < 20 || len(f[0]) != 1 {
		return Stat{}, fmt.Errorf("procfs: malformed stat %q", b)
	}
	s := Stat{PID: pid, State: f[0][0]}
	ints := []*int{&s.PPID, &s.PGID, &s.SID}
	for i, p := range ints {
		if *p, err = strconv.Atoi(f[1+i]); err != nil {
			return Stat{}, fmt.Errorf("procfs: malformed stat field %d: %w", 4+i, err)
		}
	}
	if s.Start, err = strconv.ParseUint(f[19], 10, 64); err != nil {
		return Stat{}, fmt.Errorf("procfs: malformed stat starttime: %w", err)
	}
	return s, nil
}

// StartTime returns the start time of pid (clock ticks since boot).
func StartTime(pid int) (uint64, error) {
	s, err := Read(pid)
	if err != nil {
		return 0, err
	}
	return s.Start, nil
}

// All returns every process on the host (of this pid namespace). Processes
// that exit while it reads are left out.
func All() ([]Stat, error) {
	d, err := os.Open("/proc")
	if err != nil {
		return nil, fmt.Errorf("procfs: %w", err)
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("procfs: %w", err)
	}
	out := make([]Stat, 0, len(names))
	for _, n := range names {
		if n == "" || n[0] < '0' || n[0] > '9' {
			continue
		}
		pid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		s, err := Read(pid)
		if err != nil {
			continue // exited meanwhile, or unreadable
		}
		out = append(out, s)
	}
	return out, nil
}

// HasEnv reports whether the initial environment of pid (as it was at its
// last exec) holds the entry kv ("NAME=value") exactly. An environment that
// cannot be read (another user's process, gone) does not.
func HasEnv(pid int, kv string) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return false
	}
	want := []byte(kv)
	for len(b) > 0 {
		var entry []byte
		if i := bytes.IndexByte(b, 0); i >= 0 {
			entry, b = b[:i], b[i+1:]
		} else {
			entry, b = b, nil
		}
		if bytes.Equal(entry, want) {
			return true
		}
	}
	return false
}

var (
	bootOnce sync.Once
	bootID   string
)

// BootID returns the kernel's id of the current boot ("" when unknown). A
// process recorded under another boot id is gone, whatever its pid says.
func BootID() string {
	bootOnce.Do(func() {
		b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
		if err == nil {
			bootID = strings.TrimSpace(string(b))
		}
	})
	return bootID
}

var (
	nsOnce sync.Once
	nsID   string
)

// PIDNamespace returns the id of this process's pid namespace ("" when
// unknown): pids are only comparable within one.
func PIDNamespace() string {
	nsOnce.Do(func() {
		if l, err := os.Readlink("/proc/self/ns/pid"); err == nil {
			nsID = l
		}
	})
	return nsID
}
