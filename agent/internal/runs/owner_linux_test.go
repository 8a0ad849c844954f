package runs

import (
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/chronoscron/chronos/agent/internal/procfs"
	"github.com/chronoscron/chronos/agent/job"
)

// TestOwnersByStartTime: on the same host a claim that records its owner's
// boot and start time tells a live owner (never reaped, whatever its lease)
// from a reused pid and from an earlier boot (both gone).
func TestOwnersByStartTime(t *testing.T) {
	t.Parallel()
	self := job.Owner{Host: "h", PID: os.Getpid(), ID: "me"}
	boot, ns := procfs.BootID(), procfs.PIDNamespace()
	owner := exec.Command("sleep", "30")
	if err := owner.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = owner.Process.Kill(); _ = owner.Wait() })
	start, err := procfs.StartTime(owner.Process.Pid)
	if err != nil || boot == "" {
		t.Fatalf("start %d %v, boot %q", start, err, boot)
	}
	o := fmt.Sprintf("h:%d:other", owner.Process.Pid)
	tests := []struct {
		name  string
		claim job.Claim
		want  Liveness
	}{
		{"live owner", job.Claim{Owner: o, OwnerBoot: boot, OwnerNS: ns, OwnerStart: start}, OwnerAlive},
		{"reused pid", job.Claim{Owner: o, OwnerBoot: boot, OwnerNS: ns, OwnerStart: start - 1}, OwnerGone},
		{"earlier boot", job.Claim{Owner: o, OwnerBoot: "another-boot", OwnerNS: ns, OwnerStart: start}, OwnerGone},
		{"another pid namespace", job.Claim{Owner: "h:2147483646:x", OwnerBoot: boot, OwnerNS: "pid:[1]", OwnerStart: start}, OwnerUnknown},
		{"no start time recorded", job.Claim{Owner: o}, OwnerUnknown},
	}
	for _, tc := range tests {
		if got := Judge(tc.claim, self, Where{Boot: boot, NS: ns}); got != tc.want {
			t.Errorf("%s: Judge(%+v) = %v, want %v", tc.name, tc.claim, got, tc.want)
		}
	}
}
