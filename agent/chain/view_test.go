package chain

import (
	"strings"
	"testing"
	"time"
)

func TestWriteStoryShowsTheStepsAsATree(t *testing.T) {
	c := newChain(t, DefaultLimits())
	c.StepStarted("disk-1.action.1.1", "r1", t0)
	v := spawn(t, c, SpawnRequest{Stage: "verify", SpawnedBy: "disk-1.action.1.1"})
	c.StepEnded(Step{JobID: "disk-1.action.1.1", Status: StepSucceeded, Output: "output/a.log"}, t0)
	c.StepEnded(Step{JobID: v.JobID, Status: StepFailed, RunID: "r2", Reason: "exit status 1\x1b[2J"}, t0.Add(time.Minute))
	var b strings.Builder
	if err := WriteStory(&b, *c); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"chain disk-1 (class disk): closed",
		"  disk-1.action.1.1  [action depth 1 attempt 1]  succeeded",
		"    disk-1.verify.2.1  [verify depth 2 attempt 1]  failed",
		"run r1", "output output/a.log", "step failed: verify (failure)", `exit status 1\x1b[2J`,
		"armed -> active  (step started: disk-1.action.1.1)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("story lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\x1b") {
		t.Error("a control character reached the terminal")
	}
	b.Reset()
	if err := WriteList(&b, []Chain{*c}); err != nil || !strings.Contains(b.String(), "failure: step failed: verify") || !strings.Contains(b.String(), "2/8") {
		t.Fatalf("list %v:\n%s", err, b.String())
	}
	b.Reset()
	br := Breaker{Class: "disk", State: BreakerOpen, OpenedAt: &t0, ResumeAt: &t0, LastRunIDs: []string{"r1", "r2"}, Reason: "3 failures"}
	if err := WriteOpen(&b, nil, []Breaker{br}); err != nil || !strings.Contains(b.String(), "r1,r2") || !strings.Contains(b.String(), "open chain breakers") {
		t.Fatalf("breakers %v:\n%s", err, b.String())
	}
}
