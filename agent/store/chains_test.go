package store

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/chain"
)

func TestChainsLiveBesideTheJobs(t *testing.T) {
	home := t.TempDir()
	// A file written before chains existed loads, and is written back
	// in the same layout while it has none.
	old := "{\"version\":1,\"generation\":3,\"jobs\":[\n{\"id\":\"a\",\"schedule\":\"every 1m\",\"enabled\":true}\n]}\n"
	if err := os.WriteFile(home+"/"+JobsFile, []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	s := open(t, home)
	ctx := context.Background()
	err := s.Update(ctx, func(st *State) error {
		if st.Len() != 1 || len(st.Chains()) != 0 || st.LookupBreaker("disk") != nil {
			t.Fatalf("old file: %d jobs, %d chains", st.Len(), len(st.Chains()))
		}
		st.Job("a").Name = "renamed"
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(s.Path())
	if !strings.HasSuffix(string(raw), "\n]}\n") || strings.Contains(string(raw), "chains") {
		t.Fatalf("layout changed: %s", raw)
	}
	now := time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
	err = s.Update(ctx, func(st *State) error {
		c := chain.New(chain.StartRequest{ID: "inc", Class: "disk", Stage: "action", Limits: chain.DefaultLimits(), FireAt: now.Add(time.Minute), Now: now})
		if err := st.AddChain(c); err != nil {
			return err
		}
		if err := st.AddChain(c); err == nil {
			t.Error("a chain id was added twice")
		}
		st.Breaker("disk").NoteSpawn(now)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// A fresh store reads the chains back; an untouched job keeps its line.
	err = open(t, home).View(ctx, func(st *State) error {
		c := st.Chain("inc")
		if c == nil || c.State != chain.StateArmed || len(c.Steps) != 1 || st.LookupBreaker("disk") == nil || st.Job("a").Name != "renamed" {
			t.Fatalf("read back: chain %+v", c)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	raw, _ = os.ReadFile(s.Path())
	if lines := strings.Split(string(raw), "\n"); len(lines) != 4 || !strings.HasPrefix(lines[2], `],"chains":[{"id":"inc"`) {
		t.Fatalf("layout: %q", lines)
	}
	// Reading the chains in an update that changes nothing writes nothing.
	err = s.Update(ctx, func(st *State) error {
		_ = st.Chain("inc").Clone()
		_ = st.Breakers()
		return nil
	})
	if after, _ := os.ReadFile(s.Path()); err != nil || string(after) != string(raw) {
		t.Fatalf("an update that changed nothing rewrote the file (%v)", err)
	}
}

func TestDuplicateChainIDsAreCorrupt(t *testing.T) {
	home := t.TempDir()
	body := "{\"version\":1,\"generation\":1,\"jobs\":[],\"chains\":[{\"id\":\"x\"},{\"id\":\"x\"}]}\n"
	if err := os.WriteFile(home+"/"+JobsFile, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	err := open(t, home).View(context.Background(), func(*State) error { return nil })
	if err == nil || !strings.Contains(err.Error(), `chain id "x" appears twice`) {
		t.Fatalf("got %v", err)
	}
}
