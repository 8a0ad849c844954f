package store

import (
	"bufio"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/internal/atomicfile"
)

// A child process of TestKilledWriterLosesNothing runs this binary with
// envKillHome naming the home; it claims job "k" over and over, from two
// stores (as two replicas would), compacts now and then, and prints each
// fencing token once its claim is durable. With envKillAt ("<point>:<n>")
// it kills itself the n-th time it reaches that point of a write.
const (
	envKillHome = "CHRONOS_STORE_TEST_KILL_HOME"
	envKillAt   = "CHRONOS_STORE_TEST_KILL_AT"
)

// The points where a child kills itself.
const (
	killTorn     = "torn"     // half a record appended
	killUnsynced = "unsynced" // a whole record appended, not synced
	killCompact  = "compact"  // the new jobs.json written, not renamed
	killFold     = "fold"     // jobs.json renamed, the journal not yet cut
)

// killer kills this process the n-th time it is asked at point.
type killer struct {
	point string
	n     int
}

func (k *killer) at(point string) {
	if k.point != point {
		return
	}
	if k.n--; k.n == 0 {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
}

// child is the writing process of TestKilledWriterLosesNothing.
type child struct {
	kill   killer
	stores [2]*Store
	other  int // the store that does not compact now
	out    *bufio.Writer
}

// options are the child's store options, with its kill points. In a
// compaction set to be killed at killFold, the other store claims while
// the new jobs.json is written, so that the journal is then replaced by
// what was appended meanwhile.
func (c *child) options() Options {
	k := &c.kill
	return Options{
		MaxRecords: 64,
		Append: func(f *os.File, data []byte) error {
			if k.point == killTorn && k.n == 1 {
				_, _ = f.Write(data[:len(data)/2])
			}
			k.at(killTorn)
			if _, err := f.Write(data); err != nil {
				return err
			}
			k.at(killUnsynced)
			return atomicfile.DataSync(f)
		},
		WriteFile: func(path string, data []byte, perm fs.FileMode) error {
			err := atomicfile.Replace(path, data, perm)
			switch {
			case strings.HasPrefix(filepath.Base(path), compactPrefix):
				k.at(killCompact)
				if k.point == killFold {
					if cerr := c.claim(c.stores[c.other]); cerr != nil {
						return cerr
					}
				}
			case filepath.Base(path) == JournalFile:
				k.at(killFold)
			}
			return err
		},
	}
}

// claim claims job k's next slot through s and prints the token.
func (c *child) claim(s *Store) error {
	var token uint64
	err := s.Update(context.Background(), func(st *State) error {
		j := st.Job("k")
		slot := *j.NextRunAt
		cl, ok := j.ClaimSlot(slot, job.Claim{RunID: "r" + strconv.FormatUint(j.Fence+1, 10), Slot: slot, Owner: "h:1:u"})
		if !ok {
			return fmt.Errorf("slot %s not claimable", slot)
		}
		j.Claims = j.Claims[len(j.Claims)-1:]
		next := slot.Add(time.Minute)
		j.NextRunAt = &next
		token = cl.Token
		return nil
	})
	if err != nil {
		return err
	}
	fmt.Fprintln(c.out, token)
	return c.out.Flush()
}

func TestMain(m *testing.M) {
	if home := os.Getenv(envKillHome); home != "" {
		os.Exit(claimForever(home))
	}
	os.Exit(m.Run())
}

func claimForever(home string) int {
	c := &child{out: bufio.NewWriter(os.Stdout)}
	if at := os.Getenv(envKillAt); at != "" {
		point, n, _ := strings.Cut(at, ":")
		c.kill.point = point
		c.kill.n, _ = strconv.Atoi(n)
	}
	for i := range c.stores {
		s, err := Open(home, c.options())
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		c.stores[i] = s
	}
	for i := 0; ; i++ {
		s := c.stores[i%2]
		if err := c.claim(s); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if i%5 == 0 {
			c.other = (i + 1) % 2
			if err := s.Compact(context.Background()); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
		}
	}
}

// TestKilledWriterLosesNothing kills a process that claims one job over
// and over (appending to the journal, compacting it, rewriting jobs.json)
// many times: at the worst points of a write (half a record appended, a
// record appended but not synced, a compaction between its steps) and at
// arbitrary moments. After each kill the home reads, no claim the process
// saw durable is lost, at most the one in flight is there besides, fencing
// tokens and slots follow each other without a gap, and the next process
// goes on from there.
func TestKilledWriterLosesNothing(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	first := time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
	err := open(t, home).Update(context.Background(), func(st *State) error {
		return st.Add(&job.Job{ID: "k", Schedule: "every 1m", Enabled: true, NextRunAt: &first})
	})
	if err != nil {
		t.Fatal(err)
	}
	points := []string{killTorn, killUnsynced, killCompact, killFold, ""}
	rounds := 4 * len(points)
	if testing.Short() {
		rounds = 2 * len(points)
	}
	var durable uint64
	for round := range rounds {
		point := points[round%len(points)]
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), envKillHome+"="+home, fmt.Sprintf("%s=%s:%d", envKillAt, point, 3+round*7%40))
		cmd.Stderr = os.Stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := bufio.NewScanner(stdout)
		for i := 0; point != "" || i < 40+round*37%150; i++ {
			if !lines.Scan() {
				break // killed itself
			}
			if i > 5000 {
				_ = cmd.Process.Kill()
				t.Fatalf("round %d: the writer never reached %s", round, point)
			}
			n, err := strconv.ParseUint(lines.Text(), 10, 64)
			if err != nil || n != durable+1 {
				t.Fatalf("round %d: token %q after %d", round, lines.Text(), durable)
			}
			durable = n
		}
		if point == "" {
			if err := cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			for lines.Scan() {
				if n, err := strconv.ParseUint(lines.Text(), 10, 64); err == nil && n == durable+1 {
					durable = n
				}
			}
		}
		err = cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("round %d (%s): the writer ended with %v, want killed", round, point, err)
		}
		j, err := open(t, home).Get(context.Background(), "k")
		if err != nil {
			t.Fatalf("round %d: read after the kill: %v", round, err)
		}
		if j.Fence < durable || j.Fence > durable+1 || (point == killTorn && j.Fence != durable) {
			t.Fatalf("round %d (%s): fence %d, the writer saw %d durable", round, point, j.Fence, durable)
		}
		if want := first.Add(time.Duration(j.Fence) * time.Minute); !j.NextRunAt.Equal(want) || len(j.Claims) != 1 || j.Claims[0].Token != j.Fence {
			t.Fatalf("round %d: next %s (want %s), claims %+v", round, j.NextRunAt, want, j.Claims)
		}
		durable = j.Fence
	}
}
