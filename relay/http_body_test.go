package relay

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/chronoscron/chronos/contract"
)

// TestRelayBodyIsJSONMarshal: the hand-built relay body is byte for byte
// what encoding/json writes, so NAS reads it on its canonical fast path.
func TestRelayBodyIsJSONMarshal(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 6, 18, 9, 0, 0, 123_000_000, time.FixedZone("x", 3600))
	for _, l := range []Lease{
		{OneShot: OneShot{ScheduleID: "sch_1", AgentID: "agent-1", JobID: "job-1", FireAt: at, Attempt: 1}},
		{OneShot: OneShot{ScheduleID: "s<&>", AgentID: "a\"b\\c", JobID: "jöb\u2028\x01\t", FireAt: at.Add(time.Nanosecond), Attempt: 12}},
		{OneShot: OneShot{}},
	} {
		want, err := json.Marshal(contract.RelayRequest{ScheduleID: l.ScheduleID, AgentID: l.AgentID, JobID: l.JobID,
			FireAt: contract.NewTime(l.FireAt), Attempt: l.Attempt})
		if err != nil {
			t.Fatal(err)
		}
		if got := relayBody(l); !bytes.Equal(got, want) {
			t.Errorf("\n got %s\nwant %s", got, want)
		}
	}
}
