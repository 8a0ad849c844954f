package nashttp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/nas"
	nashttp "github.com/chronoscron/chronos/nas/http"
	"github.com/chronoscron/chronos/relay"
)

// The host httptest.NewRequest gives every request, as a browser's origin.
const testOrigin = "http://example.com"

// formHeader is the header of a login form post from the page's origin.
var formHeader = map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Origin": testOrigin}

// login posts the login form and returns the session cookie it set.
func (b *bundle) login(t *testing.T) *http.Cookie {
	t.Helper()
	rec := b.do(b.internal, request{method: "POST", path: nashttp.PathDashboardLogin, body: "token=" + opToken, header: formHeader})
	if rec.Code != http.StatusSeeOther || rec.Header().Get("Location") != nashttp.PathDashboard {
		t.Fatalf("login: %d %v %s", rec.Code, rec.Header(), rec.Body)
	}
	for _, c := range rec.Result().Cookies() {
		if c.Name == nashttp.OperatorCookie {
			return c
		}
	}
	t.Fatalf("login set no %s cookie: %v", nashttp.OperatorCookie, rec.Header())
	return nil
}

func TestDashboardOverview(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.deadLetter(t, "dead")
	b.provision(tokenA, "live", time.Now().Add(time.Hour))
	b.provision(tokenB, "live", time.Now().Add(time.Hour))
	b.provision(tokenB, "other", time.Now().Add(time.Hour))
	if rec := b.do(b.internal, request{method: "POST", path: "/api/operator/instances/" + instanceB + "/stop", token: opToken}); rec.Code != 200 {
		t.Fatalf("stop: %d %s", rec.Code, rec.Body)
	}
	rec := b.do(b.internal, request{method: "GET", path: contract.PathOperatorOverview, token: opToken})
	if rec.Code != 200 {
		t.Fatalf("overview: %d %s", rec.Code, rec.Body)
	}
	ov := decodeBody[contract.OperatorOverview](t, rec)
	if ov.Store != (contract.StoreGauges{Armed: 3, DeadLetter: 1}) {
		t.Errorf("store %+v, want 3 armed and 1 dead", ov.Store)
	}
	wantAgents := []contract.AgentArmedCount{{AgentID: agentA, Armed: 1}, {AgentID: agentB, Armed: 2}}
	if len(ov.Agents) != 2 || ov.Agents[0] != wantAgents[0] || ov.Agents[1] != wantAgents[1] || ov.AgentsTruncated {
		t.Errorf("agents %+v, want %+v", ov.Agents, wantAgents)
	}
	if len(ov.StoppedInstances) != 1 || ov.StoppedInstances[0].InstanceID != instanceB || ov.StoppedInstances[0].StoppedAt == nil {
		t.Errorf("stopped instances %+v, want %s with its time", ov.StoppedInstances, instanceB)
	}
	if ov.FireLag.Count != 0 || ov.FireLag.P50Seconds != nil {
		t.Errorf("fire lag %+v before any delivery", ov.FireLag)
	}
	for _, o := range []string{"delivered", "rejected", "retry", "dropped", "duplicate", "instance_stopped"} {
		if n, ok := ov.Deliveries[o]; !ok || n != 0 {
			t.Errorf("deliveries[%s] = %d, %v; want 0 and present", o, n, ok)
		}
	}
	if time.Since(ov.GeneratedAt.Time) > time.Minute {
		t.Errorf("generated_at %v", ov.GeneratedAt)
	}
}

func TestDashboardOverviewRefusals(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		opts   []setupOpt
		req    request
		status int
		code   string
	}{
		{name: "without token", req: request{method: "GET", path: contract.PathOperatorOverview}, status: 401, code: contract.CodeUnauthenticated},
		{name: "wrong token", req: request{method: "GET", path: contract.PathOperatorOverview, token: "guess"}, status: 403, code: contract.CodeForbidden},
		{name: "agent token", req: request{method: "GET", path: contract.PathOperatorOverview, token: tokenA}, status: 403, code: contract.CodeForbidden},
		{name: "query parameter", req: request{method: "GET", path: contract.PathOperatorOverview + "?agent=a", token: opToken, invalid: true}, status: 400, code: contract.CodeInvalidRequest},
		{name: "forged cookie", req: request{method: "GET", path: contract.PathOperatorOverview, header: map[string]string{"Cookie": nashttp.OperatorCookie + "=v1.99999999999.AAAA"}}, status: 401, code: contract.CodeUnauthenticated},
		{name: "store down", opts: []setupOpt{withBrokenEngine}, req: request{method: "GET", path: contract.PathOperatorOverview, token: opToken}, status: 500, code: contract.CodeServerError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, tt.opts...)
			rec := b.do(b.internal, tt.req)
			if rec.Code != tt.status || errCode(t, rec) != tt.code {
				t.Fatalf("%d %s, want %d %s", rec.Code, rec.Body, tt.status, tt.code)
			}
		})
	}
}

func TestDashboardLogin(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		body     string
		header   map[string]string
		status   int
		location string
		cookie   bool
		secure   bool
	}{
		{name: "right token", body: "token=" + opToken, header: formHeader, status: 303, location: "/ui/", cookie: true},
		{name: "wrong token", body: "token=guess", header: formHeader, status: 303, location: "/ui/?login=failed"},
		{name: "empty token", body: "token=", header: formHeader, status: 303, location: "/ui/?login=failed"},
		{name: "agent token", body: "token=" + tokenA, header: formHeader, status: 303, location: "/ui/?login=failed"},
		{name: "other origin", body: "token=" + opToken, header: map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Origin": "http://evil.test"}, status: 403},
		{name: "same host other port", body: "token=" + opToken, header: map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Origin": "http://example.com:8080"}, status: 403},
		{name: "opaque origin", body: "token=" + opToken, header: map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Origin": "null"}, status: 403},
		{name: "opaque origin from a cross-site page", body: "token=" + opToken, header: map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Origin": "null", "Sec-Fetch-Site": "cross-site"}, status: 403},
		{name: "opaque origin from the page itself", body: "token=" + opToken, header: map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Origin": "null", "Sec-Fetch-Site": "same-origin"}, status: 303, location: "/ui/", cookie: true},
		{name: "no origin at all", body: "token=" + opToken, header: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, status: 403},
		{name: "cross-site fetch metadata", body: "token=" + opToken, header: map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Sec-Fetch-Site": "cross-site"}, status: 403},
		{name: "same-origin fetch metadata", body: "token=" + opToken, header: map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Sec-Fetch-Site": "same-origin"}, status: 303, location: "/ui/", cookie: true},
		{name: "behind a TLS proxy", body: "token=" + opToken, header: map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Origin": "https://example.com", "X-Forwarded-Proto": "https"}, status: 303, location: "/ui/", cookie: true, secure: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			rec := b.do(b.internal, request{method: "POST", path: nashttp.PathDashboardLogin, body: tt.body, header: tt.header})
			if rec.Code != tt.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, tt.status, rec.Body)
			}
			if tt.status == 403 && errCode(t, rec) != contract.CodeForbidden {
				t.Fatalf("body %s", rec.Body)
			}
			if got := rec.Header().Get("Location"); got != tt.location {
				t.Fatalf("Location %q, want %q", got, tt.location)
			}
			cookies := rec.Result().Cookies()
			if !tt.cookie {
				if len(cookies) != 0 {
					t.Fatalf("cookies set: %v", cookies)
				}
				return
			}
			if len(cookies) != 1 {
				t.Fatalf("cookies %v, want one", cookies)
			}
			c := cookies[0]
			if c.Name != nashttp.OperatorCookie || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" || c.Secure != tt.secure ||
				c.MaxAge != int(nas.OperatorSessionTTL.Seconds()) || strings.Contains(c.Value, opToken) {
				t.Fatalf("cookie %+v", c)
			}
			if err := b.svc.AuthorizeOperatorSession(c.Value); err != nil {
				t.Fatalf("the cookie is not a session: %v", err)
			}
		})
	}
}

func TestDashboardCookieAuthorizesOperatorRoutes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sch := b.deadLetter(t, "dead")
	ck := b.login(t)
	cookie := ck.Name + "=" + ck.Value
	replay := func(header map[string]string) *httptest.ResponseRecorder {
		h := map[string]string{"Cookie": cookie}
		for k, v := range header {
			h[k] = v
		}
		return b.do(b.internal, request{method: "POST", path: contract.PathOperatorDLQReplay, body: contract.DLQReplayRequest{ScheduleIDs: []string{sch}}, header: h})
	}
	stillDead := func(when string) {
		t.Helper()
		if _, err := b.engine.Get(context.Background(), agentA, "dead"); err == nil {
			t.Fatalf("%s: the dead letter was replayed", when)
		}
	}

	if rec := b.do(b.internal, request{method: "GET", path: contract.PathOperatorDLQ, header: map[string]string{"Cookie": cookie}}); rec.Code != 200 {
		t.Fatalf("dlq with the cookie: %d %s", rec.Code, rec.Body)
	}
	if rec := replay(map[string]string{"Origin": "http://evil.test"}); rec.Code != 403 || errCode(t, rec) != contract.CodeForbidden {
		t.Fatalf("cross-origin replay: %d %s", rec.Code, rec.Body)
	}
	stillDead("cross-origin replay")
	if rec := replay(nil); rec.Code != 403 {
		t.Fatalf("replay without Origin: %d %s", rec.Code, rec.Body)
	}
	stillDead("replay without Origin")
	if rec := replay(map[string]string{"Origin": testOrigin}); rec.Code != 200 || decodeBody[contract.DLQReplayResponse](t, rec).Replayed != 1 {
		t.Fatalf("same-origin replay: %d %s", rec.Code, rec.Body)
	}
	if row, err := b.engine.Get(context.Background(), agentA, "dead"); err != nil || row.State != relay.StateArmed {
		t.Fatalf("replayed row %+v %v", row, err)
	}

	// A session of another operator token is worth nothing here.
	other := setup(t, func(c *nas.Config, _ *nas.Options) { c.OperatorToken = "another-operator-token" })
	if rec := other.do(other.internal, request{method: "GET", path: contract.PathOperatorOverview, header: map[string]string{"Cookie": cookie}}); rec.Code != 401 {
		t.Fatalf("another token's session: %d %s", rec.Code, rec.Body)
	}

	rec := b.do(b.internal, request{method: "POST", path: nashttp.PathDashboardLogout, header: map[string]string{"Cookie": cookie, "Origin": testOrigin}})
	if rec.Code != 303 || rec.Header().Get("Location") != nashttp.PathDashboard {
		t.Fatalf("logout: %d %v", rec.Code, rec.Header())
	}
	if cs := rec.Result().Cookies(); len(cs) != 1 || cs[0].Name != nashttp.OperatorCookie || cs[0].MaxAge >= 0 || cs[0].Value != "" {
		t.Fatalf("logout cookies %v", cs)
	}
	if rec := b.do(b.internal, request{method: "POST", path: nashttp.PathDashboardLogout, header: map[string]string{"Origin": "http://evil.test"}}); rec.Code != 403 {
		t.Fatalf("cross-origin logout: %d", rec.Code)
	}
}

func TestDashboardSessionExpires(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)
	b := setup(t, func(_ *nas.Config, o *nas.Options) { o.Now = func() time.Time { return now } })
	value, exp, err := b.svc.OperatorLogin(opToken)
	if err != nil {
		t.Fatal(err)
	}
	if !exp.Equal(now.Add(nas.OperatorSessionTTL)) {
		t.Fatalf("expiry %v", exp)
	}
	if err := b.svc.AuthorizeOperatorSession(value); err != nil {
		t.Fatalf("fresh session refused: %v", err)
	}
	parts := strings.Split(value, ".")
	for _, bad := range []string{"", "v1", value + "x", "v2." + parts[1] + "." + parts[2], "v1." + parts[1] + "0." + parts[2], "v1.x." + parts[2]} {
		if err := b.svc.AuthorizeOperatorSession(bad); err == nil {
			t.Errorf("session %q accepted", bad)
		}
	}
	now = exp
	if err := b.svc.AuthorizeOperatorSession(value); err == nil {
		t.Fatal("expired session accepted")
	}
}

func TestDashboardAssets(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *nas.Config, _ *nas.Options) { c.RelayListen = "127.0.0.1:0" })
	rec := b.do(b.internal, request{method: "GET", path: "/"})
	if rec.Code != 303 || rec.Header().Get("Location") != nashttp.PathDashboard {
		t.Fatalf("/: %d %v", rec.Code, rec.Header())
	}
	for _, tt := range []struct{ path, ctype, contains string }{
		{"/ui/", "text/html; charset=utf-8", `action="/ui/login"`},
		{"/ui/app.js", "text/javascript; charset=utf-8", "/api/operator/overview"},
		{"/ui/app.css", "text/css; charset=utf-8", "@media"},
	} {
		rec := b.do(b.internal, request{method: "GET", path: tt.path})
		if rec.Code != 200 || rec.Header().Get("Content-Type") != tt.ctype || !strings.Contains(rec.Body.String(), tt.contains) {
			t.Fatalf("%s: %d %q, want %s with %q", tt.path, rec.Code, rec.Header().Get("Content-Type"), tt.ctype, tt.contains)
		}
		if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "connect-src 'self'") {
			t.Fatalf("%s: CSP %q", tt.path, csp)
		}
		// Nothing the page loads may come from elsewhere.
		for _, ref := range []string{"http://", "https://", "//fonts", "@import"} {
			if strings.Contains(rec.Body.String(), ref) {
				t.Fatalf("%s refers to %q", tt.path, ref)
			}
		}
	}
	if rec := b.do(b.internal, request{method: "GET", path: "/ui/missing.js"}); rec.Code != 404 || errCode(t, rec) != contract.CodeNotFound {
		t.Fatalf("missing asset: %d %s", rec.Code, rec.Body)
	}
	// The public listener of a split NAS serves no dashboard.
	if rec := b.do(b.public, request{method: "GET", path: "/ui/", invalid: true}); rec.Code != 404 {
		t.Fatalf("public /ui/: %d", rec.Code)
	}
	// Nor does a NAS without an operator token.
	off := setup(t, func(c *nas.Config, _ *nas.Options) { c.OperatorToken = "" })
	for _, p := range []string{"/ui/", contract.PathOperatorOverview} {
		if rec := off.do(off.internal, request{method: "GET", path: p}); rec.Code != 404 {
			t.Fatalf("%s without operator token: %d", p, rec.Code)
		}
	}
	if rec := off.do(off.internal, request{method: "POST", path: nashttp.PathDashboardLogin, body: "token=x", header: formHeader}); rec.Code != 404 {
		t.Fatalf("login without operator token: %d", rec.Code)
	}
}
