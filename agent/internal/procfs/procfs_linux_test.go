package procfs

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		line string
		want Stat
		bad  bool
	}{
		{"plain", "42 (sleep) S 7 42 7 0 -1 4194304 94 0 0 0 0 0 0 0 20 0 1 0 123456 8192 1 0", Stat{PID: 42, PPID: 7, PGID: 42, SID: 7, Start: 123456, State: 'S'}, false},
		{"comm with parens and spaces", "9 (a) (b c) Z 1 9 9 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 77 0 0", Stat{PID: 9, PPID: 1, PGID: 9, SID: 9, Start: 77, State: 'Z'}, false},
		{"truncated", "9 (x) S 1 2", Stat{}, true},
		{"no comm", "9 S 1 2 3", Stat{}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseStat([]byte(tc.line))
			if (err != nil) != tc.bad || got != tc.want {
				t.Fatalf("parseStat = %+v, %v; want %+v (bad %v)", got, err, tc.want, tc.bad)
			}
		})
	}
}

// TestReadsLiveProcesses: a child is found with its parent, group, start
// time and environment; it is dead once exited, before it is waited for.
func TestReadsLiveProcesses(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("sleep", "30")
	cmd.Env = append(os.Environ(), "PROCFS_TEST=yes")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	s, err := Read(cmd.Process.Pid)
	if err != nil || s.PPID != os.Getpid() || s.Start == 0 || s.Dead() {
		t.Fatalf("Read = %+v, %v", s, err)
	}
	all, err := All()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, a := range all {
		found = found || (a.PID == s.PID && a.Start == s.Start && a.PGID == s.PGID)
	}
	if !found {
		t.Fatalf("All lacks %+v", s)
	}
	if !HasEnv(cmd.Process.Pid, "PROCFS_TEST=yes") || HasEnv(cmd.Process.Pid, "PROCFS_TEST=y") {
		t.Fatal("environment not read exactly")
	}
	if BootID() == "" || !strings.HasPrefix(PIDNamespace(), "pid:[") || !Supported() || !Alive(cmd.Process.Pid) {
		t.Fatalf("boot id %q, pid namespace %q, supported %v", BootID(), PIDNamespace(), Supported())
	}
	_ = cmd.Process.Kill()
	for {
		s, err := Read(cmd.Process.Pid)
		if err != nil {
			t.Fatal(err) // not waited for: it stays as a zombie
		}
		if s.Dead() {
			break
		}
		time.Sleep(time.Millisecond) // the kernel's exit is asynchronous
	}
}
