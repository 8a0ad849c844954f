package nashttp_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/nas"
	"github.com/chronoscron/chronos/relay"
)

func TestNASProvision(t *testing.T) {
	t.Parallel()
	fireAt := time.Now().Add(time.Hour).Truncate(time.Second)
	valid := func(b *bundle) contract.ProvisionRequest { return b.provisionBody("job-1", fireAt) }
	tests := []struct {
		name   string
		opts   []setupOpt
		req    func(b *bundle) request
		status int
		code   string
	}{
		{name: "ok", status: 200, req: func(b *bundle) request {
			return request{method: "POST", path: contract.PathProvision, token: tokenA, body: valid(b)}
		}},
		{name: "no token", status: 401, code: contract.CodeUnauthenticated, req: func(b *bundle) request {
			return request{method: "POST", path: contract.PathProvision, body: valid(b)}
		}},
		{name: "basic auth", status: 401, code: contract.CodeUnauthenticated, req: func(b *bundle) request {
			return request{method: "POST", path: contract.PathProvision, body: valid(b), header: map[string]string{"Authorization": "Basic YTpi"}}
		}},
		{name: "unknown agent", status: 403, code: contract.CodeInvalidClient, req: func(b *bundle) request {
			return request{method: "POST", path: contract.PathProvision, token: "someone-else", body: valid(b)}
		}},
		{name: "bad job id", status: 400, code: contract.CodeInvalidJobID, req: func(b *bundle) request {
			r := valid(b)
			r.JobID, r.DedupKey = "bad/job", "bad/job:"+fireAt.UTC().Format(time.RFC3339)
			return request{method: "POST", path: contract.PathProvision, token: tokenA, body: r, invalid: true}
		}},
		{name: "missing fire_at", status: 400, code: contract.CodeInvalidFireAt, req: func(b *bundle) request {
			return request{method: "POST", path: contract.PathProvision, token: tokenA, invalid: true,
				body: fmt.Sprintf(`{"job_id":"job-1","agent_callback_url":%q,"dedup_key":"job-1:x"}`, b.agent.URL())}
		}},
		{name: "loose fire_at", status: 400, code: contract.CodeInvalidFireAt, req: func(b *bundle) request {
			return request{method: "POST", path: contract.PathProvision, token: tokenA, invalid: true,
				body: fmt.Sprintf(`{"job_id":"job-1","fire_at":"2030-01-01T1:00:00Z","agent_callback_url":%q,"dedup_key":"job-1:2030-01-01T1:00:00Z"}`, b.agent.URL())}
		}},
		{name: "dedup key of another instant", status: 400, code: contract.CodeInvalidDedupKey, req: func(b *bundle) request {
			r := valid(b)
			r.DedupKey = "job-1:" + fireAt.Add(time.Second).UTC().Format(time.RFC3339)
			return request{method: "POST", path: contract.PathProvision, token: tokenA, body: r}
		}},
		{name: "dedup key of another job", status: 400, code: contract.CodeInvalidDedupKey, req: func(b *bundle) request {
			r := valid(b)
			r.DedupKey = "job-2:" + fireAt.UTC().Format(time.RFC3339)
			return request{method: "POST", path: contract.PathProvision, token: tokenA, body: r}
		}},
		{name: "callback not http", status: 400, code: contract.CodeInvalidCallbackURL, req: func(b *bundle) request {
			r := valid(b)
			r.AgentCallbackURL = "ftp://agent.example.com"
			return request{method: "POST", path: contract.PathProvision, token: tokenA, body: r}
		}},
		{name: "callback with user info", status: 400, code: contract.CodeInvalidCallbackURL, req: func(b *bundle) request {
			r := valid(b)
			r.AgentCallbackURL = "https://u:p@agent.example.com"
			return request{method: "POST", path: contract.PathProvision, token: tokenA, body: r}
		}},
		{name: "callback to loopback refused", status: 422, code: contract.CodeInvalidCallbackURL,
			opts: []setupOpt{func(c *nas.Config, _ *nas.Options) { c.AllowPrivateCallbacks = false }},
			req: func(b *bundle) request {
				r := valid(b)
				r.AgentCallbackURL = "http://127.0.0.1:9"
				return request{method: "POST", path: contract.PathProvision, token: tokenA, body: r}
			}},
		{name: "callback to metadata refused", status: 422, code: contract.CodeInvalidCallbackURL, req: func(b *bundle) request {
			r := valid(b)
			r.AgentCallbackURL = "http://169.254.169.254"
			return request{method: "POST", path: contract.PathProvision, token: tokenA, body: r}
		}},
		{name: "unknown field", status: 400, code: contract.CodeUnknownField, req: func(b *bundle) request {
			return request{method: "POST", path: contract.PathProvision, token: tokenA, invalid: true,
				body: `{"job_id":"job-1","jobId":"x"}`}
		}},
		{name: "duplicate key", status: 400, code: contract.CodeDuplicateKey, req: func(b *bundle) request {
			return request{method: "POST", path: contract.PathProvision, token: tokenA, invalid: true,
				body: `{"job_id":"job-1","JOB_ID":"job-2"}`}
		}},
		{name: "trailing data", status: 400, code: contract.CodeTrailingData, req: func(b *bundle) request {
			return request{method: "POST", path: contract.PathProvision, token: tokenA, invalid: true, body: `{"job_id":"job-1"} {}`}
		}},
		{name: "not json", status: 400, code: contract.CodeInvalidJSON, req: func(b *bundle) request {
			return request{method: "POST", path: contract.PathProvision, token: tokenA, invalid: true, body: `{job_id`}
		}},
		{name: "too large", status: 413, code: contract.CodeBodyTooLarge, req: func(b *bundle) request {
			return request{method: "POST", path: contract.PathProvision, token: tokenA, invalid: true,
				body: `{"job_id":"` + strings.Repeat("x", 70<<10) + `"}`}
		}},
		{name: "too large, chunked", status: 413, code: contract.CodeBodyTooLarge, req: func(b *bundle) request {
			return request{method: "POST", path: contract.PathProvision, token: tokenA, invalid: true, chunked: true,
				body: `{"job_id":"` + strings.Repeat("x", 70<<10) + `"}`}
		}},
		{name: "wrong content type", status: 415, code: contract.CodeUnsupportedMediaType, req: func(b *bundle) request {
			return request{method: "POST", path: contract.PathProvision, token: tokenA, invalid: true, body: valid(b),
				header: map[string]string{"Content-Type": "text/plain"}}
		}},
		{name: "fire_at in the past", status: 422, code: contract.CodeFireAtInPast, req: func(b *bundle) request {
			return request{method: "POST", path: contract.PathProvision, token: tokenA, body: b.provisionBody("job-1", time.Now().Add(-time.Minute))}
		}},
		{name: "fire_at too far", status: 422, code: contract.CodeFireAtTooFar, req: func(b *bundle) request {
			return request{method: "POST", path: contract.PathProvision, token: tokenA, body: b.provisionBody("job-1", time.Now().Add(401*24*time.Hour))}
		}},
		{name: "store down", status: 500, code: contract.CodeServerError, opts: []setupOpt{withBrokenEngine}, req: func(b *bundle) request {
			return request{method: "POST", path: contract.PathProvision, token: tokenA, body: valid(b)}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, tt.opts...)
			rec := b.do(b.public, tt.req(b))
			if rec.Code != tt.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, tt.status, rec.Body)
			}
			// A refused bearer token names the scheme (RFC 6750 §3).
			if wa := rec.Header().Get("WWW-Authenticate"); (tt.status == 401) != strings.HasPrefix(wa, "Bearer ") {
				t.Fatalf("WWW-Authenticate %q on a %d", wa, tt.status)
			}
			if tt.code != "" {
				if got := errCode(t, rec); got != tt.code {
					t.Fatalf("error %q, want %q", got, tt.code)
				}
				// Nothing was written.
				if _, err := b.engine.Get(context.Background(), agentA, "job-1"); !errors.Is(err, relay.ErrNotFound) {
					t.Fatalf("a refused provision armed the job: %v", err)
				}
			}
		})
	}
}

func TestNASProvisionUpsert(t *testing.T) {
	t.Parallel()
	b := setup(t)
	fireAt := time.Now().Add(time.Hour).Truncate(time.Second).UTC()
	first := b.provision(tokenA, "job-1", fireAt)
	if !first.Armed || first.ScheduleID == "" || !first.FireAt.Equal(fireAt) {
		t.Fatalf("first provision: %+v", first)
	}
	// The same instant written with another offset is the same fire.
	tz := time.FixedZone("", 5*3600+30*60)
	local := fireAt.In(tz).Format(time.RFC3339)
	body := fmt.Sprintf(`{"job_id":"job-1","fire_at":%q,"agent_callback_url":%q,"dedup_key":"job-1:%s"}`, local, b.agent.URL(), local)
	rec := b.do(b.public, request{method: "POST", path: contract.PathProvision, token: tokenA, body: body})
	if rec.Code != 200 {
		t.Fatalf("offset provision: %d %s", rec.Code, rec.Body)
	}
	if again := decodeBody[contract.ProvisionResponse](t, rec); again.ScheduleID != first.ScheduleID {
		t.Fatalf("same instant got a new schedule id %s, want %s", again.ScheduleID, first.ScheduleID)
	}
	moved := b.provision(tokenA, "job-1", fireAt.Add(time.Minute))
	if moved.ScheduleID == first.ScheduleID {
		t.Fatal("a new fire_at kept the schedule id")
	}
	// Another agent's job of the same id is its own row.
	other := b.provision(tokenB, "job-1", fireAt)
	if other.ScheduleID == moved.ScheduleID {
		t.Fatal("agents share a row")
	}
}

func TestNASProvisionQuotaAndRate(t *testing.T) {
	t.Parallel()
	t.Run("quota", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(c *nas.Config, _ *nas.Options) { c.Limits.MaxArmedPerAgent = 2 })
		at := time.Now().Add(time.Hour)
		b.provision(tokenA, "a", at)
		b.provision(tokenA, "b", at)
		rec := b.do(b.public, request{method: "POST", path: contract.PathProvision, token: tokenA, body: b.provisionBody("c", at)})
		if rec.Code != 422 || errCode(t, rec) != contract.CodeQuotaExceeded {
			t.Fatalf("third arm: %d %s", rec.Code, rec.Body)
		}
		b.provision(tokenA, "b", at.Add(time.Minute)) // re-arming within the quota is fine
		b.provision(tokenB, "c", at)                  // the quota is per agent
	})
	t.Run("rate", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(c *nas.Config, _ *nas.Options) { c.Limits.RatePerSecond, c.Limits.Burst = 0.01, 2 })
		at := time.Now().Add(time.Hour)
		b.provision(tokenA, "a", at)
		b.provision(tokenA, "b", at)
		for _, path := range []string{contract.PathProvision, contract.PathCancel, contract.PathList, contract.PathArmed} {
			r := request{method: "POST", path: path, token: tokenA, body: b.provisionBody("c", at)}
			switch path {
			case contract.PathList:
				r = request{method: "GET", path: path, token: tokenA}
			case contract.PathCancel:
				r.body = contract.CancelRequest{JobID: "a"}
			case contract.PathArmed:
				r = request{method: "PUT", path: path, token: tokenA, body: contract.PutArmedRequest{Armed: []contract.DesiredArm{}}}
			}
			rec := b.do(b.public, r)
			if rec.Code != 429 || errCode(t, rec) != contract.CodeRateLimited || rec.Header().Get("Retry-After") == "" {
				t.Fatalf("%s over the rate: %d %s %v", path, rec.Code, rec.Body, rec.Header())
			}
		}
		b.provision(tokenB, "a", at) // the limit is per agent
		if _, err := b.engine.Get(context.Background(), agentA, "c"); !errors.Is(err, relay.ErrNotFound) {
			t.Fatal("a rate-limited call wrote")
		}
	})
}

func TestNASCancel(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		opts   []setupOpt
		req    request
		status int
		code   string
		gone   bool // job-1 of agent A is cancelled afterwards
	}{
		{name: "ok", req: request{token: tokenA, body: contract.CancelRequest{JobID: "job-1"}}, status: 200, gone: true},
		{name: "unknown job is a no-op", req: request{token: tokenA, body: contract.CancelRequest{JobID: "nope"}}, status: 200},
		{name: "another agent's job is a missing one", req: request{token: tokenB, body: contract.CancelRequest{JobID: "job-1"}}, status: 200},
		{name: "bad job id", req: request{token: tokenA, body: contract.CancelRequest{JobID: ""}, invalid: true}, status: 400, code: contract.CodeInvalidJobID},
		{name: "unknown field", req: request{token: tokenA, body: `{"job_id":"job-1","x":1}`, invalid: true}, status: 400, code: contract.CodeUnknownField},
		{name: "no token", req: request{body: contract.CancelRequest{JobID: "job-1"}}, status: 401, code: contract.CodeUnauthenticated},
		{name: "unknown agent", req: request{token: "nobody", body: contract.CancelRequest{JobID: "job-1"}}, status: 403, code: contract.CodeInvalidClient},
		{name: "too large", req: request{token: tokenA, body: `{"job_id":"` + strings.Repeat("a", 70<<10) + `"}`, invalid: true}, status: 413, code: contract.CodeBodyTooLarge},
		{name: "content type", req: request{token: tokenA, body: contract.CancelRequest{JobID: "job-1"}, header: map[string]string{"Content-Type": "application/xml"}, invalid: true}, status: 415, code: contract.CodeUnsupportedMediaType},
		{name: "store down", opts: []setupOpt{withBrokenEngine}, req: request{token: tokenA, body: contract.CancelRequest{JobID: "job-1"}}, status: 500, code: contract.CodeServerError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, tt.opts...)
			if len(tt.opts) == 0 {
				b.provision(tokenA, "job-1", time.Now().Add(time.Hour))
			}
			tt.req.method, tt.req.path = "POST", contract.PathCancel
			rec := b.do(b.public, tt.req)
			if rec.Code != tt.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, tt.status, rec.Body)
			}
			if tt.code != "" && errCode(t, rec) != tt.code {
				t.Fatalf("error %s, want %s", rec.Body, tt.code)
			}
			if tt.code == "" && !decodeBody[contract.OKResponse](t, rec).OK {
				t.Fatalf("body %s", rec.Body)
			}
			if len(tt.opts) == 0 {
				_, err := b.engine.Get(context.Background(), agentA, "job-1")
				if gone := errors.Is(err, relay.ErrNotFound); gone != tt.gone {
					t.Fatalf("job gone = %v, want %v", gone, tt.gone)
				}
			}
		})
	}
}

func TestNASList(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *nas.Config, _ *nas.Options) { c.Limits.Burst = 1000 })
	at := time.Now().Add(time.Hour)
	const n = 205
	for i := range n {
		b.provision(tokenA, fmt.Sprintf("job-%03d", i), at)
	}
	b.provision(tokenB, "b-only", at)

	// Page through with a limit above the maximum: clamped to 100.
	var got []string
	cursor := ""
	pages := 0
	var firstCursor string
	for {
		path := contract.PathList + "?limit=1000"
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		rec := b.do(b.public, request{method: "GET", path: path, token: tokenA})
		if rec.Code != 200 {
			t.Fatalf("page %d: %d %s", pages, rec.Code, rec.Body)
		}
		page := decodeBody[contract.ListResponse](t, rec)
		if len(page.Armed) > contract.MaxListLimit {
			t.Fatalf("page of %d", len(page.Armed))
		}
		for _, a := range page.Armed {
			got = append(got, a.JobID)
		}
		pages++
		if page.NextCursor == nil {
			break
		}
		if firstCursor == "" {
			firstCursor = *page.NextCursor
		}
		cursor = *page.NextCursor
	}
	if len(got) != n || pages != 3 {
		t.Fatalf("listed %d jobs in %d pages, want %d in 3", len(got), pages, n)
	}
	for _, j := range got {
		if j == "b-only" {
			t.Fatal("agent A saw agent B's job")
		}
	}
	tests := []struct {
		name   string
		opts   []setupOpt
		path   string
		token  string
		status int
		code   string
	}{
		{name: "small page", path: contract.PathList + "?limit=5", token: tokenA, status: 200},
		{name: "another agent's cursor", path: contract.PathList + "?cursor=" + firstCursor, token: tokenB, status: 400, code: contract.CodeInvalidCursor},
		{name: "tampered cursor", path: contract.PathList + "?cursor=" + firstCursor[:len(firstCursor)-2] + "AA", token: tokenA, status: 400, code: contract.CodeInvalidCursor},
		{name: "made-up cursor", path: contract.PathList + "?cursor=job-100", token: tokenA, status: 400, code: contract.CodeInvalidCursor},
		{name: "bad limit", path: contract.PathList + "?limit=ten", token: tokenA, status: 400, code: contract.CodeInvalidRequest},
		{name: "no token", path: contract.PathList, status: 401, code: contract.CodeUnauthenticated},
		{name: "unknown agent", path: contract.PathList, token: "nobody", status: 403, code: contract.CodeInvalidClient},
	}
	for _, tt := range tests {
		rec := b.do(b.public, request{method: "GET", path: tt.path, token: tt.token, invalid: tt.code == contract.CodeInvalidRequest})
		if rec.Code != tt.status {
			t.Fatalf("%s: status %d, want %d: %s", tt.name, rec.Code, tt.status, rec.Body)
		}
		if tt.code != "" && errCode(t, rec) != tt.code {
			t.Fatalf("%s: %s, want %s", tt.name, rec.Body, tt.code)
		}
	}
	// A limit too large for an int is clamped like any large one; a
	// negative one is refused.
	for _, tt := range []struct {
		limit  string
		status int
	}{{"99999999999999999999999", 200}, {"-99999999999999999999999", 400}, {"0", 400}, {"101", 200}} {
		rec := b.do(b.public, request{method: "GET", path: contract.PathList + "?limit=" + tt.limit, token: tokenA, invalid: true})
		if rec.Code != tt.status {
			t.Fatalf("limit=%s: status %d, want %d: %s", tt.limit, rec.Code, tt.status, rec.Body)
		}
		if tt.status == 200 {
			if page := decodeBody[contract.ListResponse](t, rec); len(page.Armed) != contract.MaxListLimit || page.NextCursor == nil {
				t.Fatalf("limit=%s: %d jobs, next %v", tt.limit, len(page.Armed), page.NextCursor)
			}
		}
	}
	// The store failing is a 500.
	broken := setup(t, withBrokenEngine)
	rec := broken.do(broken.public, request{method: "GET", path: contract.PathList, token: tokenA})
	if rec.Code != 500 || errCode(t, rec) != contract.CodeServerError {
		t.Fatalf("broken store: %d %s", rec.Code, rec.Body)
	}
}

func TestNASPutArmed(t *testing.T) {
	t.Parallel()
	at := time.Now().Add(time.Hour).Truncate(time.Second)
	desired := func(b *bundle, jobs map[string]time.Time) contract.PutArmedRequest {
		req := contract.PutArmedRequest{Armed: []contract.DesiredArm{}}
		for j, t := range jobs {
			p := b.provisionBody(j, t)
			req.Armed = append(req.Armed, contract.DesiredArm{JobID: p.JobID, FireAt: p.FireAt, AgentCallbackURL: p.AgentCallbackURL, DedupKey: p.DedupKey})
		}
		return req
	}
	t.Run("diff", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.provision(tokenA, "keep", at)
		b.provision(tokenA, "move", at)
		b.provision(tokenA, "drop", at)
		b.provision(tokenB, "drop", at)
		rec := b.do(b.public, request{method: "PUT", path: contract.PathArmed, token: tokenA,
			body: desired(b, map[string]time.Time{"keep": at, "move": at.Add(time.Minute), "new": at})})
		if rec.Code != 200 {
			t.Fatalf("%d %s", rec.Code, rec.Body)
		}
		resp := decodeBody[contract.PutArmedResponse](t, rec)
		want := fmt.Sprint([]string{"new"}, []string{"move"}, []string{"drop"}, []string{"keep"})
		if got := fmt.Sprint(resp.Created, resp.Updated, resp.Cancelled, resp.Unchanged); got != want || len(resp.Armed) != 3 {
			t.Fatalf("changes %s, want %s (%d armed)", got, want, len(resp.Armed))
		}
		if _, err := b.engine.Get(context.Background(), agentB, "drop"); err != nil {
			t.Fatal("agent B's job was touched")
		}
	})
	tests := []struct {
		name   string
		opts   []setupOpt
		body   func(b *bundle) any
		token  string
		hdr    map[string]string
		status int
		code   string
		inv    bool
	}{
		{name: "invalid entry writes nothing", token: tokenA, status: 422, code: contract.CodeFireAtInPast, body: func(b *bundle) any {
			return desired(b, map[string]time.Time{"new": at, "past": time.Now().Add(-time.Hour)})
		}},
		{name: "job listed twice", token: tokenA, status: 400, code: contract.CodeInvalidRequest, body: func(b *bundle) any {
			r := desired(b, map[string]time.Time{"new": at})
			r.Armed = append(r.Armed, r.Armed[0])
			return r
		}},
		{name: "armed missing", token: tokenA, status: 400, code: contract.CodeInvalidRequest, inv: true, body: func(*bundle) any { return `{}` }},
		{name: "over quota", token: tokenA, status: 422, code: contract.CodeQuotaExceeded,
			opts: []setupOpt{func(c *nas.Config, _ *nas.Options) { c.Limits.MaxArmedPerAgent = 1 }},
			body: func(b *bundle) any { return desired(b, map[string]time.Time{"new": at, "other": at}) }},
		{name: "no token", status: 401, code: contract.CodeUnauthenticated, body: func(b *bundle) any { return desired(b, nil) }},
		{name: "unknown agent", token: "nobody", status: 403, code: contract.CodeInvalidClient, body: func(b *bundle) any { return desired(b, nil) }},
		{name: "too large", token: tokenA, status: 413, code: contract.CodeBodyTooLarge, inv: true, body: func(*bundle) any {
			return `{"armed":[{"job_id":"` + strings.Repeat("x", 5<<20) + `"}]}`
		}},
		{name: "content type", token: tokenA, status: 415, code: contract.CodeUnsupportedMediaType, inv: true,
			hdr: map[string]string{"Content-Type": "text/json"}, body: func(b *bundle) any { return desired(b, nil) }},
		{name: "store down", token: tokenA, status: 500, code: contract.CodeServerError, opts: []setupOpt{withBrokenEngine},
			body: func(b *bundle) any { return desired(b, map[string]time.Time{"new": at}) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, tt.opts...)
			rec := b.do(b.public, request{method: "PUT", path: contract.PathArmed, token: tt.token, body: tt.body(b), header: tt.hdr, invalid: tt.inv})
			if rec.Code != tt.status || errCode(t, rec) != tt.code {
				t.Fatalf("%d %s, want %d %s", rec.Code, rec.Body, tt.status, tt.code)
			}
			if _, err := b.engine.Get(context.Background(), agentA, "new"); !errors.Is(err, relay.ErrNotFound) {
				t.Fatal("a refused bulk update wrote")
			}
		})
	}
}

func TestNASRoutesAndHealth(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tests := []struct {
		name, method, path string
		h                  http.Handler
		status             int
		code               string
		inv                bool
	}{
		{name: "jwks", method: "GET", path: contract.PathJWKS, status: 200},
		{name: "healthz", method: "GET", path: contract.PathHealthz, status: 200},
		{name: "readyz", method: "GET", path: contract.PathReadyz, status: 200},
		{name: "metrics", method: "GET", path: contract.PathMetrics, status: 200},
		{name: "unknown route", method: "GET", path: "/nope", status: 404, code: contract.CodeNotFound, inv: true},
		{name: "wrong method", method: "DELETE", path: contract.PathProvision, status: 405, code: contract.CodeMethodNotAllowed, inv: true},
	}
	for _, tt := range tests {
		rec := b.do(b.public, request{method: tt.method, path: tt.path, invalid: tt.inv})
		if rec.Code != tt.status {
			t.Fatalf("%s: %d %s", tt.name, rec.Code, rec.Body)
		}
		if tt.code != "" && errCode(t, rec) != tt.code {
			t.Fatalf("%s: %s", tt.name, rec.Body)
		}
	}
	rec := b.do(b.public, request{method: "GET", path: contract.PathJWKS})
	if cc := rec.Header().Get("Cache-Control"); !strings.Contains(cc, "max-age=") {
		t.Fatalf("JWKS Cache-Control %q", cc)
	}
	jwks := decodeBody[contract.JWKS](t, rec)
	if len(jwks.Keys) != 1 || jwks.Keys[0].Kty != "OKP" || jwks.Keys[0].Kid == "" {
		t.Fatalf("jwks %+v", jwks)
	}
	// Not ready once the store stops answering.
	broken := setup(t, withBrokenEngine)
	rec = broken.do(broken.public, request{method: "GET", path: contract.PathReadyz})
	if rec.Code != 503 || decodeBody[contract.HealthResponse](t, rec).Checks["store"] == "ok" {
		t.Fatalf("readyz with a broken store: %d %s", rec.Code, rec.Body)
	}
}

func TestNASSplitListeners(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *nas.Config, _ *nas.Options) { c.RelayListen = "127.0.0.1:0" })
	body := relayBody(t, agentA, "job-1", "sch-x", time.Now(), 1)
	// The public listener does not serve the relay, operator routes or
	// metrics: a documented 404, checked against the description.
	for _, r := range []request{
		b.signedRelay("d-1", time.Now(), body),
		{method: "POST", path: "/api/operator/instances/inst-a/stop", token: opToken},
		{method: "GET", path: contract.PathMetrics},
	} {
		if rec := b.do(b.public, r); rec.Code != 404 || errCode(t, rec) != contract.CodeNotFound {
			t.Fatalf("public %s: %d", r.path, rec.Code)
		}
	}
	// The internal one serves them, and not the agent API.
	if rec := b.do(b.internal, b.signedRelay("d-1", time.Now(), body)); rec.Code != 200 {
		t.Fatalf("internal relay: %d %s", rec.Code, rec.Body)
	}
	for _, r := range []request{
		{method: "GET", path: contract.PathList, token: tokenA},
		{method: "POST", path: contract.PathProvision, token: tokenA, body: b.provisionBody("job-1", time.Now().Add(time.Hour))},
		{method: "GET", path: contract.PathJWKS},
	} {
		if rec := b.do(b.internal, r); rec.Code != 404 || errCode(t, rec) != contract.CodeNotFound {
			t.Fatalf("internal %s: %d", r.path, rec.Code)
		}
	}
	if rec := b.do(b.internal, request{method: "GET", path: contract.PathMetrics}); rec.Code != 200 {
		t.Fatalf("internal metrics: %d", rec.Code)
	}
}

// TestNASInternalRoutesAnswerTheHostOnly: without relay_listen, the relay
// route, metrics and the operator routes share the agent-facing listener
// and answer only clients on NAS's own host (loopback, or the address the
// connection arrived on, and not passed on by a proxy): any other gets 403
// and changes nothing. The agent API answers everyone. With relay_listen
// they have a listener of their own, which answers whoever reaches it.
func TestNASInternalRoutesAnswerTheHostOnly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	internal := []request{
		{method: http.MethodGet, path: contract.PathMetrics},
		{method: http.MethodGet, path: contract.PathOperatorDLQ, token: opToken},
		{method: http.MethodPost, path: contract.PathRelay, body: "{}", invalid: true}, // unsigned: 401 on the host
		{method: http.MethodGet, path: "/"},
	}
	for _, tc := range []struct {
		name   string
		remote string
		header map[string]string
		local  bool
	}{
		{"loopback", "127.0.0.1:5000", nil, true},
		{"loopback v6", "[::1]:5000", nil, true},
		{"another host", "198.51.100.7:5000", nil, false},
		{"another host over v6", "[2001:db8::7]:5000", nil, false},
		{"a proxy on the host", "127.0.0.1:5000", map[string]string{"X-Forwarded-For": "198.51.100.7"}, false},
		{"a proxy that says Forwarded", "127.0.0.1:5000", map[string]string{"Forwarded": "for=198.51.100.7"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, r := range internal {
				r.remote, r.header, r.invalid = tc.remote, tc.header, r.invalid || !tc.local
				rec := b.do(b.public, r)
				if tc.local {
					if rec.Code == http.StatusForbidden {
						t.Fatalf("%s %s from %s: 403 %s", r.method, r.path, tc.remote, rec.Body)
					}
					continue
				}
				if rec.Code != http.StatusForbidden || errCode(t, rec) != contract.CodeForbidden {
					t.Fatalf("%s %s from %s: %d %s, want 403 forbidden", r.method, r.path, tc.remote, rec.Code, rec.Body)
				}
			}
			// The agent API answers agents wherever they are.
			if rec := b.do(b.public, request{method: http.MethodGet, path: contract.PathJWKS, remote: tc.remote, header: tc.header}); rec.Code != http.StatusOK {
				t.Fatalf("jwks from %s: %d", tc.remote, rec.Code)
			}
		})
	}
	disable := request{method: http.MethodPost, path: "/api/operator/agents/" + agentA + "/disable", token: opToken,
		remote: "198.51.100.7:5000", invalid: true}
	if rec := b.do(b.public, disable); rec.Code != http.StatusForbidden {
		t.Fatalf("disable from another host: %d %s", rec.Code, rec.Body)
	}
	if f, err := b.engine.AgentFlow(context.Background(), agentA); err != nil || f.Policy.Disabled {
		t.Fatalf("a refused disable changed the agent: %+v, %v", f, err)
	}
	split := setup(t, func(c *nas.Config, _ *nas.Options) { c.RelayListen = "127.0.0.1:0" })
	if rec := split.do(split.internal, request{method: http.MethodGet, path: contract.PathMetrics, remote: "198.51.100.7:5000"}); rec.Code != http.StatusOK {
		t.Fatalf("metrics on relay_listen from another host: %d %s", rec.Code, rec.Body)
	}
}
