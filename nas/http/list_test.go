package nashttp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/nas"
	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/memory"
)

// wireArmed is a list or bulk answer's armed entry with fire_at as the raw
// string on the wire.
type wireArmed struct {
	JobID      string `json:"job_id"`
	FireAt     string `json:"fire_at"`
	ScheduleID string `json:"schedule_id"`
}

// wireList is a list answer with raw strings.
type wireList struct {
	Armed       []wireArmed       `json:"armed"`
	NextCursor  *string           `json:"next_cursor"`
	FailedFires []json.RawMessage `json:"failed_fires"`
}

// provisionSpelt provisions job with fire_at written exactly as spelt (and
// dedup_key with it) and returns the raw answer.
func (b *bundle) provisionSpelt(token, job, spelt string) (sch, fireAt string) {
	b.t.Helper()
	body := fmt.Sprintf(`{"job_id":%q,"fire_at":%q,"agent_callback_url":%q,"dedup_key":%q}`, job, spelt, b.agent.URL(), job+":"+spelt)
	rec := b.do(b.public, request{method: http.MethodPost, path: contract.PathProvision, token: token, body: body})
	if rec.Code != http.StatusOK {
		b.t.Fatalf("provision %s at %s: %d %s", job, spelt, rec.Code, rec.Body)
	}
	var resp struct {
		ScheduleID string `json:"schedule_id"`
		FireAt     string `json:"fire_at"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
		b.t.Fatal(err)
	}
	return resp.ScheduleID, resp.FireAt
}

// listRaw lists with the query and decodes the answer with raw fire_at strings.
func (b *bundle) listRaw(token, query string) wireList {
	b.t.Helper()
	rec := b.do(b.public, request{method: http.MethodGet, path: contract.PathList + query, token: token})
	if rec.Code != http.StatusOK {
		b.t.Fatalf("list%s: %d %s", query, rec.Code, rec.Body)
	}
	return decodeBody[wireList](b.t, rec)
}

// spellings writes instants the ways agents do: offsets, fractions, UTC.
var spellings = []func(time.Time) string{
	func(t time.Time) string { return t.In(time.FixedZone("", 2*3600)).Format("2006-01-02T15:04:05-07:00") },
	func(t time.Time) string {
		return t.In(time.FixedZone("", -(5*3600 + 1800))).Format("2006-01-02T15:04:05.000-07:00")
	},
	func(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05+00:00") },
	func(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000000Z") },
	func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
}

// 105 jobs provisioned in agents' own spellings are all in one list without a
// limit, each fire_at byte-identical to what was sent, as in the answer to
// the provision; the same instant in another spelling keeps the schedule id
// and takes the new spelling; the bulk answer speaks the same way.
func TestNASListFireAtAsProvisioned(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *nas.Config, _ *nas.Options) { c.Limits.Burst = 1000 })
	base := time.Now().Add(time.Hour).Truncate(time.Second)
	sent := map[string]string{}
	schedules := map[string]string{}
	for i := range 105 {
		job := fmt.Sprintf("job-%03d", i)
		spelt := spellings[i%len(spellings)](base.Add(time.Duration(i) * time.Minute))
		sch, answered := b.provisionSpelt(tokenA, job, spelt)
		if answered != spelt {
			t.Fatalf("provision of %s answered fire_at %q, sent %q", job, answered, spelt)
		}
		sent[job], schedules[job] = spelt, sch
	}
	list := b.listRaw(tokenA, "")
	if len(list.Armed) != 105 || list.NextCursor != nil {
		t.Fatalf("list without limit: %d jobs, next %v; want all 105 and no cursor", len(list.Armed), list.NextCursor)
	}
	for _, a := range list.Armed {
		if a.FireAt != sent[a.JobID] || a.ScheduleID != schedules[a.JobID] {
			t.Fatalf("%s listed at %q (%s), provisioned at %q (%s)", a.JobID, a.FireAt, a.ScheduleID, sent[a.JobID], schedules[a.JobID])
		}
	}

	// The same instant in another spelling: the same arm, spelt anew.
	at := base
	for _, spelt := range []string{spellings[1](at), contract.FormatTime(at), spellings[0](at)} {
		sch, answered := b.provisionSpelt(tokenA, "job-000", spelt)
		if sch != schedules["job-000"] || answered != spelt {
			t.Fatalf("re-provision as %q: schedule %s (was %s), answered %q", spelt, sch, schedules["job-000"], answered)
		}
		if got := b.listRaw(tokenA, "?limit=1").Armed[0]; got.JobID != "job-000" || got.FireAt != spelt {
			t.Fatalf("listed %+v after re-provision as %q", got, spelt)
		}
	}

	// The bulk form keeps spellings as well.
	spelt := spellings[1](base.Add(time.Hour))
	body := fmt.Sprintf(`{"armed":[{"job_id":"bulk","fire_at":%q,"agent_callback_url":%q,"dedup_key":%q}]}`, spelt, b.agent.URL(), "bulk:"+spelt)
	rec := b.do(b.public, request{method: http.MethodPut, path: contract.PathArmed, token: tokenB, body: body})
	if rec.Code != http.StatusOK {
		t.Fatalf("put armed: %d %s", rec.Code, rec.Body)
	}
	if put := decodeBody[struct {
		Armed []wireArmed `json:"armed"`
	}](t, rec); len(put.Armed) != 1 || put.Armed[0].FireAt != spelt {
		t.Fatalf("put armed answered %+v, sent %q", put.Armed, spelt)
	}
	if got := b.listRaw(tokenB, "").Armed; len(got) != 1 || got[0].FireAt != spelt {
		t.Fatalf("listed %+v after put armed at %q", got, spelt)
	}
}

// A fire is delivered with fire_at as the agent provisioned it, in the body
// and in the token's claim alike.
func TestNASFireCarriesTheAgentsSpelling(t *testing.T) {
	t.Parallel()
	b := setup(t)
	fireAt := time.Now().Add(-time.Second).Truncate(time.Millisecond)
	spelt := fireAt.In(time.FixedZone("", 2*3600)).Format("2006-01-02T15:04:05.000-07:00")
	sch, _ := b.provisionSpelt(tokenA, "job-1", spelt)
	rec := b.do(b.internal, b.signedRelay("d-1", time.Now(), relayBody(t, agentA, "job-1", sch, fireAt, 1)))
	if rec.Code != http.StatusOK {
		t.Fatalf("relay: %d %s", rec.Code, rec.Body)
	}
	f := <-b.agent.notify
	if f.Body.FireAt.Text() != spelt || f.Claims.FireAt != spelt || !f.Body.FireAt.Equal(fireAt) {
		t.Fatalf("fire body fire_at %q, claim %q; provisioned %q", f.Body.FireAt.Text(), f.Claims.FireAt, spelt)
	}
}

// TestNASListAllOrPaged: without limit every armed job in one answer; with a
// limit, pages clamped to 100, as the description says (the contract checker
// validates every exchange, limit=1000000 included).
func TestNASListAllOrPaged(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *nas.Config, _ *nas.Options) { c.Limits.Burst = 2000 })
	at := time.Now().Add(time.Hour)
	const n = 250
	for i := range n {
		b.provision(tokenA, fmt.Sprintf("job-%03d", i), at)
	}
	b.provision(tokenB, "b-only", at)

	rec := b.do(b.public, request{method: "GET", path: contract.PathList, token: tokenA})
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"next_cursor":null`) {
		t.Fatalf("list: %d %s", rec.Code, rec.Body.String()[:min(200, rec.Body.Len())])
	}
	all := decodeBody[wireList](t, rec)
	if len(all.Armed) != n {
		t.Fatalf("list without limit: %d jobs, want %d", len(all.Armed), n)
	}
	for i, a := range all.Armed {
		if a.JobID != fmt.Sprintf("job-%03d", i) {
			t.Fatalf("entry %d is %s: not every job in job id order", i, a.JobID)
		}
	}

	for _, tt := range []struct {
		query string
		want  int
	}{{"?limit=1000000", 100}, {"?limit=1000", 100}, {"?limit=101", 100}, {"?limit=100", 100}, {"?limit=7", 7}} {
		page := b.listRaw(tokenA, tt.query)
		if len(page.Armed) != tt.want || page.NextCursor == nil {
			t.Fatalf("list%s: %d jobs, next %v; want %d and a cursor", tt.query, len(page.Armed), page.NextCursor, tt.want)
		}
	}
	// A cursor without a limit answers the rest in one page.
	first := b.listRaw(tokenA, "?limit=100")
	rest := b.listRaw(tokenA, "?cursor="+*first.NextCursor)
	if len(rest.Armed) != n-100 || rest.NextCursor != nil || rest.Armed[0].JobID != "job-100" {
		t.Fatalf("the rest after a cursor: %d jobs from %v, next %v", len(rest.Armed), rest.Armed[0].JobID, rest.NextCursor)
	}

	// The quota bounds an unpaged answer: an agent cannot arm more.
	q := setup(t, func(c *nas.Config, _ *nas.Options) { c.Limits.MaxArmedPerAgent, c.Limits.Burst = 3, 100 })
	for i := range 3 {
		q.provision(tokenA, fmt.Sprintf("q-%d", i), at)
	}
	over := q.do(q.public, request{method: http.MethodPost, path: contract.PathProvision, token: tokenA, body: q.provisionBody("q-3", at)})
	if over.Code != http.StatusUnprocessableEntity || errCode(t, over) != contract.CodeQuotaExceeded {
		t.Fatalf("arm over quota: %d %s", over.Code, over.Body)
	}
	if got := q.listRaw(tokenA, ""); len(got.Armed) != 3 || got.NextCursor != nil {
		t.Fatalf("list at quota: %d jobs, next %v", len(got.Armed), got.NextCursor)
	}
}

// offsetClock is real time moved by an offset the test sets.
type offsetClock struct {
	mu  sync.Mutex
	off time.Duration
}

func (c *offsetClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.off)
}

func (c *offsetClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.off += d
	c.mu.Unlock()
}

// withEngineClock gives the service an embedded engine on clock.
func withEngineClock(t *testing.T, clock *offsetClock) setupOpt {
	return func(_ *nas.Config, o *nas.Options) {
		e := memory.New(memory.Options{Now: clock.Now})
		t.Cleanup(func() { _ = e.Close() })
		o.Engine = e
	}
}

// kill provisions job for agent (token) a second ago, claims it and
// dead-letters it with reason; it returns the schedule id.
func (b *bundle) kill(token, job, spelt, reason string) string {
	b.t.Helper()
	sch, _ := b.provisionSpelt(token, job, spelt)
	ctx := context.Background()
	leases, err := b.engine.Claim(ctx, 100, time.Minute, relay.Flow{})
	if err != nil || len(leases) != 1 || leases[0].ScheduleID != sch {
		b.t.Fatalf("claim of %s: %v, %+v", job, err, leases)
	}
	if err := b.engine.Kill(ctx, leases[0], reason); err != nil {
		b.t.Fatal(err)
	}
	return sch
}

// failedOf lists the agent's failed fires as the wire has them.
func (b *bundle) failedOf(token string) []map[string]any {
	b.t.Helper()
	var out []map[string]any
	for _, raw := range b.listRaw(token, "").FailedFires {
		var f map[string]any
		if err := json.Unmarshal(raw, &f); err != nil {
			b.t.Fatal(err)
		}
		out = append(out, f)
	}
	return out
}

func (b *bundle) ack(token string, ids ...string) contract.FailedFiresAckResponse {
	b.t.Helper()
	rec := b.do(b.public, request{method: http.MethodPost, path: contract.PathFailedFiresAck, token: token,
		body: contract.FailedFiresAckRequest{ScheduleIDs: ids}})
	if rec.Code != http.StatusOK {
		b.t.Fatalf("ack %v: %d %s", ids, rec.Code, rec.Body)
	}
	return decodeBody[contract.FailedFiresAckResponse](b.t, rec)
}

// Failed fires are listed on every read until the agent acknowledges them,
// in the agent's spelling, never to another agent, and not on later pages.
func TestNASFailedFiresUntilAcknowledged(t *testing.T) {
	t.Parallel()
	b := setup(t)
	past := time.Now().Add(-time.Second).Truncate(time.Millisecond)
	spelt := past.In(time.FixedZone("", -3*3600)).Format("2006-01-02T15:04:05.000-07:00")
	doomed := b.kill(tokenA, "doomed", spelt, "agent answered 404")
	other := b.kill(tokenA, "other", contract.FormatTime(past), "agent answered 410")
	bs := b.kill(tokenB, "b-job", contract.FormatTime(past), "agent answered 400")

	for read := range 3 {
		got := b.failedOf(tokenA)
		if len(got) != 2 {
			t.Fatalf("read %d: %d failed fires, want 2: %v", read, len(got), got)
		}
		byID := map[string]map[string]any{}
		for _, f := range got {
			byID[f["schedule_id"].(string)] = f
		}
		d := byID[doomed]
		if d == nil || d["fire_at"] != spelt || d["job_id"] != "doomed" || d["reason"] != "agent answered 404" || d["attempts"] != float64(1) {
			t.Fatalf("read %d: doomed reported as %v", read, d)
		}
	}
	// Later pages carry none.
	for i := range 3 {
		b.provision(tokenA, fmt.Sprintf("armed-%d", i), time.Now().Add(time.Hour))
	}
	page := b.listRaw(tokenA, "?limit=2")
	if len(page.FailedFires) != 2 || page.NextCursor == nil {
		t.Fatalf("first page: %d failed fires", len(page.FailedFires))
	}
	if next := b.listRaw(tokenA, "?limit=2&cursor="+*page.NextCursor); len(next.FailedFires) != 0 {
		t.Fatalf("second page repeats failed fires: %d", len(next.FailedFires))
	}

	// Another agent's id is ignored; the caller's own are removed, once.
	if got := b.ack(tokenA, bs, "sch-unknown"); !got.OK || got.Acknowledged != 0 {
		t.Fatalf("ack of foreign and unknown ids: %+v", got)
	}
	if len(b.failedOf(tokenB)) != 1 {
		t.Fatal("agent A's ack of B's id removed it")
	}
	if got := b.ack(tokenA, doomed, doomed); got.Acknowledged != 1 {
		t.Fatalf("ack: %+v", got)
	}
	if got := b.ack(tokenA, doomed); got.Acknowledged != 0 {
		t.Fatalf("second ack: %+v", got)
	}
	if got := b.failedOf(tokenA); len(got) != 1 || got[0]["schedule_id"] != other {
		t.Fatalf("after the ack: %v", got)
	}
	// The dead letter keeps it for operators.
	dlq := b.do(b.internal, request{method: http.MethodGet, path: contract.PathOperatorDLQ + "?agent_id=" + agentA, token: opToken})
	if entries := decodeBody[contract.DLQListResponse](t, dlq).Entries; len(entries) != 2 {
		t.Fatalf("dead letters after the ack: %d", len(entries))
	}

	// A replayed fire is no longer a failed fire.
	rec := b.do(b.internal, request{method: http.MethodPost, path: contract.PathOperatorDLQReplay, token: opToken,
		body: contract.DLQReplayRequest{ScheduleIDs: []string{other}}})
	if rec.Code != http.StatusOK || decodeBody[contract.DLQReplayResponse](t, rec).Replayed != 1 {
		t.Fatalf("replay: %d %s", rec.Code, rec.Body)
	}
	if got := b.failedOf(tokenA); len(got) != 0 {
		t.Fatalf("a replayed fire is still reported: %v", got)
	}
}

// Unacknowledged failed fires are forgotten after failed_fires_retention, by
// the store's clock.
func TestNASFailedFiresRetention(t *testing.T) {
	t.Parallel()
	clock := &offsetClock{}
	b := setup(t, withEngineClock(t, clock), func(c *nas.Config, _ *nas.Options) { c.FailedFiresRetention = 2 * time.Hour })
	if got := b.svc.Config().FailedFiresRetention; got != 2*time.Hour {
		t.Fatalf("retention %s", got)
	}
	sch := b.kill(tokenA, "doomed", contract.FormatTime(time.Now().Add(-time.Second)), "agent answered 404")
	clock.Advance(2*time.Hour - time.Minute)
	if got := b.failedOf(tokenA); len(got) != 1 || got[0]["schedule_id"] != sch {
		t.Fatalf("within the retention: %v", got)
	}
	clock.Advance(2 * time.Minute)
	if got := b.failedOf(tokenA); len(got) != 0 {
		t.Fatalf("past the retention: %v", got)
	}
	if got := b.ack(tokenA, sch); got.Acknowledged != 0 {
		t.Fatalf("ack past the retention: %+v", got)
	}
	if d := (nas.Config{}).WithDefaults().FailedFiresRetention; d != 7*24*time.Hour {
		t.Fatalf("default retention %s, want 7 days", d)
	}
}

// A bad ack is refused with the documented error and changes nothing; the
// route authenticates and rate-limits like the other agent routes.
func TestNASFailedFiresAckRefusals(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *nas.Config, _ *nas.Options) { c.Limits.Burst = 1000 })
	sch := b.kill(tokenA, "doomed", contract.FormatTime(time.Now().Add(-time.Second)), "agent answered 404")
	many := make([]string, contract.MaxFailedFires+1)
	for i := range many {
		many[i] = sch
	}
	tests := []struct {
		name    string
		token   string
		ct      string
		body    any
		status  int
		code    string
		invalid bool
	}{
		{name: "no token", body: contract.FailedFiresAckRequest{ScheduleIDs: []string{sch}}, status: 401, code: contract.CodeUnauthenticated},
		{name: "unknown agent", token: "nobody", body: contract.FailedFiresAckRequest{ScheduleIDs: []string{sch}}, status: 403, code: contract.CodeInvalidClient},
		{name: "empty body", token: tokenA, body: "", status: 400, code: contract.CodeInvalidJSON, invalid: true},
		{name: "not JSON", token: tokenA, body: `{"schedule_ids":`, status: 400, code: contract.CodeInvalidJSON, invalid: true},
		{name: "missing schedule_ids", token: tokenA, body: `{}`, status: 400, code: contract.CodeInvalidRequest, invalid: true},
		{name: "null schedule_ids", token: tokenA, body: `{"schedule_ids":null}`, status: 400, code: contract.CodeInvalidRequest, invalid: true},
		{name: "no ids", token: tokenA, body: `{"schedule_ids":[]}`, status: 400, code: contract.CodeInvalidRequest, invalid: true},
		{name: "too many ids", token: tokenA, body: contract.FailedFiresAckRequest{ScheduleIDs: many}, status: 400, code: contract.CodeInvalidRequest, invalid: true},
		{name: "empty id", token: tokenA, body: `{"schedule_ids":["` + sch + `",""]}`, status: 400, code: contract.CodeInvalidRequest, invalid: true},
		{name: "long id", token: tokenA, body: `{"schedule_ids":["` + strings.Repeat("x", 257) + `"]}`, status: 400, code: contract.CodeInvalidRequest, invalid: true},
		{name: "not strings", token: tokenA, body: `{"schedule_ids":[1]}`, status: 400, code: contract.CodeInvalidRequest, invalid: true},
		{name: "unknown field", token: tokenA, body: `{"schedule_ids":["` + sch + `"],"all":true}`, status: 400, code: contract.CodeUnknownField, invalid: true},
		{name: "trailing data", token: tokenA, body: `{"schedule_ids":["` + sch + `"]}{}`, status: 400, code: contract.CodeTrailingData, invalid: true},
		{name: "wrong content type", token: tokenA, ct: "text/plain", body: `{"schedule_ids":["` + sch + `"]}`, status: 415, code: contract.CodeUnsupportedMediaType, invalid: true},
	}
	for _, tt := range tests {
		r := request{method: http.MethodPost, path: contract.PathFailedFiresAck, token: tt.token, body: tt.body, invalid: tt.invalid}
		if tt.ct != "" {
			r.header = map[string]string{"Content-Type": tt.ct}
		}
		rec := b.do(b.public, r)
		if rec.Code != tt.status || errCode(t, rec) != tt.code {
			t.Fatalf("%s: %d %s, want %d %s", tt.name, rec.Code, rec.Body, tt.status, tt.code)
		}
		if got := b.failedOf(tokenA); len(got) != 1 {
			t.Fatalf("%s changed the failed fires: %v", tt.name, got)
		}
	}
	// Wrong method: the route is POST only.
	if rec := b.do(b.public, request{method: http.MethodGet, path: contract.PathFailedFiresAck, token: tokenA, invalid: true}); rec.Code != http.StatusMethodNotAllowed {
		t.Fatalf("GET ack: %d %s", rec.Code, rec.Body)
	}

	// Rate limited like every agent call.
	rl := setup(t, func(c *nas.Config, _ *nas.Options) { c.Limits.RatePerSecond, c.Limits.Burst = 0.01, 1 })
	ok := rl.do(rl.public, request{method: http.MethodPost, path: contract.PathFailedFiresAck, token: tokenA, body: contract.FailedFiresAckRequest{ScheduleIDs: []string{"s"}}})
	limited := rl.do(rl.public, request{method: http.MethodPost, path: contract.PathFailedFiresAck, token: tokenA, body: contract.FailedFiresAckRequest{ScheduleIDs: []string{"s"}}})
	if ok.Code != http.StatusOK || limited.Code != http.StatusTooManyRequests || limited.Header().Get("Retry-After") == "" {
		t.Fatalf("rate limit: %d then %d (Retry-After %q)", ok.Code, limited.Code, limited.Header().Get("Retry-After"))
	}

	// The store failing is a 500.
	broken := setup(t, withBrokenEngine)
	rec := broken.do(broken.public, request{method: http.MethodPost, path: contract.PathFailedFiresAck, token: tokenA, body: contract.FailedFiresAckRequest{ScheduleIDs: []string{"s"}}})
	if rec.Code != http.StatusInternalServerError || errCode(t, rec) != contract.CodeServerError {
		t.Fatalf("broken store: %d %s", rec.Code, rec.Body)
	}
}
