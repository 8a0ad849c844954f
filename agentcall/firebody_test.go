package agentcall_test

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agentcall"
	"github.com/chronoscron/chronos/contract"
)

// TestFireBodyIsJSONMarshal: the fire body is json.Marshal of the
// FireRequest, byte for byte, and AppendFireBody appends.
func TestFireBodyIsJSONMarshal(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 6, 18, 9, 0, 0, 0, time.UTC)
	for _, f := range []contract.FireRequest{
		{JobID: "job", FireAt: contract.NewTime(at), ScheduleID: "sch-1", Attempt: 1},
		{JobID: "nightly-report.v2", FireAt: contract.NewTime(at.Add(123456789 * time.Nanosecond)), ScheduleID: "01JZ8", Attempt: 12},
		{JobID: "job", FireAt: contract.NewTimeSpelled(at, "2026-06-18T11:00:00+02:00"), ScheduleID: "s", Attempt: 2},
		{JobID: `j"o\b<&>`, FireAt: contract.NewTime(at), ScheduleID: "sch-\u00e9\u2028\x00", Attempt: 1},
		{JobID: "job", ScheduleID: "s", Attempt: 0},
	} {
		want, err := json.Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		if got := agentcall.FireBody(&f); !bytes.Equal(got, want) {
			t.Errorf("FireBody(%+v)\n got  %s\n want %s", f, got, want)
		}
		if got := agentcall.AppendFireBody([]byte("keep:"), &f); !bytes.Equal(got, append([]byte("keep:"), want...)) {
			t.Errorf("AppendFireBody does not append: %s", got)
		}
	}
}
