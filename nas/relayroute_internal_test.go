package nas

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agentcall"
	"github.com/chronoscron/chronos/contract"
)

// fireRequestCases are FireRequests whose JSON spells every branch of the
// hand-written encoder: plain and escaped ids, canonical, fractional and
// spelled fire_at, the zero fire_at, negative and large attempts.
func fireRequestCases() []contract.FireRequest {
	at := time.Date(2026, 6, 18, 9, 0, 0, 0, time.UTC)
	spelled := contract.NewTimeSpelled(at, "2026-06-18T11:00:00+02:00")
	return []contract.FireRequest{
		{JobID: "job", FireAt: contract.NewTime(at), ScheduleID: "sch-1", Attempt: 1},
		{JobID: "nightly-report.v2", FireAt: contract.NewTime(at.Add(123456789 * time.Nanosecond)), ScheduleID: "01JZ8", Attempt: 12},
		{JobID: "job", FireAt: spelled, ScheduleID: "s", Attempt: 2},
		{JobID: "job", FireAt: contract.NewTime(at.In(time.FixedZone("x", 3600))), ScheduleID: "s", Attempt: 1},
		{JobID: `j"o\b<&>`, FireAt: contract.NewTime(at), ScheduleID: "sch-\u00e9\u2028\x00", Attempt: 1},
		{JobID: "job", ScheduleID: "s", Attempt: 0},
		{JobID: "", FireAt: contract.NewTime(at), ScheduleID: "", Attempt: -3},
		{JobID: "job", FireAt: contract.NewTime(at), ScheduleID: "s", Attempt: 1 << 62},
		{JobID: "\xff\xfe", FireAt: contract.NewTime(at), ScheduleID: "s", Attempt: 1},
	}
}

// TestAppendFireRequestIsJSONMarshal: the fire body NAS sends is json.Marshal
// of the FireRequest, byte for byte.
func TestAppendFireRequestIsJSONMarshal(t *testing.T) {
	t.Parallel()
	for _, f := range fireRequestCases() {
		want, err := json.Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendFireRequest(nil, &f); !bytes.Equal(got, want) {
			t.Errorf("appendFireRequest(%+v)\n got  %s\n want %s", f, got, want)
		}
		prefix := []byte("keep:")
		if got := appendFireRequest(prefix, &f); !bytes.Equal(got, append([]byte("keep:"), want...)) {
			t.Errorf("appendFireRequest does not append: %s", got)
		}
	}
}

func FuzzAppendFireRequest(f *testing.F) {
	for _, c := range fireRequestCases() {
		f.Add(c.JobID, c.ScheduleID, c.FireAt.Text(), c.Attempt)
	}
	f.Fuzz(func(t *testing.T, job, sched, at string, attempt int) {
		fire := contract.FireRequest{JobID: job, ScheduleID: sched, Attempt: attempt}
		if v, err := contract.ParseTime(at); err == nil {
			fire.FireAt = contract.NewTimeSpelled(v, at)
		}
		want, err := json.Marshal(fire)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendFireRequest(nil, &fire); !bytes.Equal(got, want) {
			t.Fatalf("got  %s\nwant %s", got, want)
		}
	})
}

// TestDeliveredReason: the last-fire reason of a delivered fire names the
// agent's HTTP status and its status word, when it sent one.
func TestDeliveredReason(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("w", 64)
	for _, tc := range []struct {
		res  agentcall.FireResult
		want string
	}{
		{agentcall.FireResult{HTTPStatus: 202, AgentStatus: "accepted"}, "agent answered 202 accepted"},
		{agentcall.FireResult{HTTPStatus: 200, AgentStatus: "gone"}, "agent answered 200 gone"},
		{agentcall.FireResult{HTTPStatus: 204}, "agent answered 204"},
		{agentcall.FireResult{HTTPStatus: 299, AgentStatus: long}, "agent answered 299 " + long},
	} {
		if got := deliveredReason(tc.res); got != tc.want {
			t.Errorf("deliveredReason(%+v) = %q, want %q", tc.res, got, tc.want)
		}
	}
}
