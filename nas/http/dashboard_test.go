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

// sameOriginHeader is the header of a call from the page's own origin.
var sameOriginHeader = map[string]string{"Origin": testOrigin}

// login posts the login form and returns the session cookie it set.
func (b *bundle) login(t *testing.T) *http.Cookie {
	t.Helper()
	rec := b.do(b.internal, request{method: "POST", path: contract.PathOperatorSession, body: contract.OperatorSessionRequest{Token: opToken}, header: sameOriginHeader})
	if rec.Code != http.StatusOK {
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
	const form = "application/x-www-form-urlencoded"
	tests := []struct {
		name    string
		body    any
		header  map[string]string
		invalid bool
		status  int
		code    string
		secure  bool
	}{
		{name: "right token", body: contract.OperatorSessionRequest{Token: opToken}, header: sameOriginHeader, status: 200},
		{name: "wrong token", body: contract.OperatorSessionRequest{Token: "guess"}, header: sameOriginHeader, status: 401, code: contract.CodeUnauthenticated},
		{name: "empty token", body: `{"token":""}`, header: sameOriginHeader, invalid: true, status: 401, code: contract.CodeUnauthenticated},
		{name: "agent token", body: contract.OperatorSessionRequest{Token: tokenA}, header: sameOriginHeader, status: 401, code: contract.CodeUnauthenticated},
		{name: "unknown field", body: `{"token":"x","user":"root"}`, header: sameOriginHeader, invalid: true, status: 400, code: contract.CodeUnknownField},
		{name: "a form post", body: "token=" + opToken, header: map[string]string{"Origin": testOrigin, "Content-Type": form}, invalid: true, status: 415, code: contract.CodeUnsupportedMediaType},
		{name: "other origin", body: contract.OperatorSessionRequest{Token: opToken}, header: map[string]string{"Origin": "http://evil.test"}, status: 403, code: contract.CodeForbidden},
		{name: "same host other port", body: contract.OperatorSessionRequest{Token: opToken}, header: map[string]string{"Origin": "http://example.com:8080"}, status: 403, code: contract.CodeForbidden},
		{name: "no origin at all", body: contract.OperatorSessionRequest{Token: opToken}, status: 403, code: contract.CodeForbidden},
		{name: "opaque origin", body: contract.OperatorSessionRequest{Token: opToken}, header: map[string]string{"Origin": "null"}, status: 403, code: contract.CodeForbidden},
		{name: "opaque origin from a cross-site page", body: contract.OperatorSessionRequest{Token: opToken}, header: map[string]string{"Origin": "null", "Sec-Fetch-Site": "cross-site"}, status: 403, code: contract.CodeForbidden},
		{name: "opaque origin from the page itself", body: contract.OperatorSessionRequest{Token: opToken}, header: map[string]string{"Origin": "null", "Sec-Fetch-Site": "same-origin"}, status: 200},
		{name: "cross-site fetch metadata", body: contract.OperatorSessionRequest{Token: opToken}, header: map[string]string{"Sec-Fetch-Site": "cross-site"}, status: 403, code: contract.CodeForbidden},
		{name: "same-origin fetch metadata", body: contract.OperatorSessionRequest{Token: opToken}, header: map[string]string{"Sec-Fetch-Site": "same-origin"}, status: 200},
		{name: "behind a TLS proxy", body: contract.OperatorSessionRequest{Token: opToken}, header: map[string]string{"Origin": "https://example.com", "X-Forwarded-Proto": "https"}, status: 200, secure: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			rec := b.do(b.internal, request{method: "POST", path: contract.PathOperatorSession, body: tt.body, header: tt.header, invalid: tt.invalid})
			if rec.Code != tt.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, tt.status, rec.Body)
			}
			cookies := rec.Result().Cookies()
			if tt.status != 200 {
				if errCode(t, rec) != tt.code || len(cookies) != 0 {
					t.Fatalf("body %s, cookies %v; want %s and no cookie", rec.Body, cookies, tt.code)
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
			if err := b.svc.OperatorAuth().AuthorizeSession(context.Background(), c.Value); err != nil {
				t.Fatalf("the cookie is not a session: %v", err)
			}
			got := decodeBody[contract.OperatorSessionResponse](t, rec)
			if d := time.Until(got.ExpiresAt.Time); d < nas.OperatorSessionTTL-time.Minute || d > nas.OperatorSessionTTL {
				t.Fatalf("expires_at %v", got.ExpiresAt)
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

	rec := b.do(b.internal, request{method: "DELETE", path: contract.PathOperatorSession, header: map[string]string{"Cookie": cookie, "Origin": testOrigin}})
	if rec.Code != 200 || !decodeBody[contract.OKResponse](t, rec).OK {
		t.Fatalf("logout: %d %s", rec.Code, rec.Body)
	}
	if cs := rec.Result().Cookies(); len(cs) != 1 || cs[0].Name != nashttp.OperatorCookie || cs[0].MaxAge >= 0 || cs[0].Value != "" {
		t.Fatalf("logout cookies %v", cs)
	}
	if rec := b.do(b.internal, request{method: "DELETE", path: contract.PathOperatorSession, header: map[string]string{"Origin": "http://evil.test"}}); rec.Code != 403 || errCode(t, rec) != contract.CodeForbidden {
		t.Fatalf("cross-origin logout: %d %s", rec.Code, rec.Body)
	}
}

func TestDashboardSessionExpires(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)
	b := setup(t, func(_ *nas.Config, o *nas.Options) { o.Now = func() time.Time { return now } })
	value, exp, err := b.svc.OperatorAuth().Login("192.0.2.1:1234", opToken)
	if err != nil {
		t.Fatal(err)
	}
	if !exp.Equal(now.Add(nas.OperatorSessionTTL)) {
		t.Fatalf("expiry %v", exp)
	}
	ctx := context.Background()
	if err := b.svc.OperatorAuth().AuthorizeSession(ctx, value); err != nil {
		t.Fatalf("fresh session refused: %v", err)
	}
	parts := strings.Split(value, ".")
	for _, bad := range []string{"", "v2", value + "x", "v1." + parts[2] + "." + parts[3], "v1." + parts[1] + "." + parts[2] + "." + parts[3],
		"v2." + parts[1] + "x." + parts[2] + "." + parts[3], "v2." + parts[1] + "." + parts[2] + "0." + parts[3], "v2." + parts[1] + ".x." + parts[3],
		"v2.." + parts[2] + "." + parts[3]} {
		if err := b.svc.OperatorAuth().AuthorizeSession(ctx, bad); err == nil {
			t.Errorf("session %q accepted", bad)
		}
	}
	now = exp
	if err := b.svc.OperatorAuth().AuthorizeSession(ctx, value); err == nil {
		t.Fatal("expired session accepted")
	}
}

func TestDashboardAssets(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *nas.Config, _ *nas.Options) { c.RelayListen = "127.0.0.1:0" })
	for _, tt := range []struct{ path, ctype, contains string }{
		{"/", "text/html; charset=utf-8", `id="login-form"`},
		{"/ui", "text/html; charset=utf-8", `id="login-form"`},
		{"/ui/app.js", "text/javascript; charset=utf-8", "/api/operator/session"},
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
	if rec := b.do(b.public, request{method: "GET", path: "/ui", invalid: true}); rec.Code != 404 {
		t.Fatalf("public /ui: %d", rec.Code)
	}
	// The page's earlier address, /ui/, sends browsers and bookmarks to
	// /ui (an alias the API description leaves out: a path with a trailing
	// slash).
	redirect := httptest.NewRecorder()
	b.srv.InternalHandler().ServeHTTP(redirect, httptest.NewRequest(http.MethodGet, "/ui/", nil))
	if redirect.Code != http.StatusPermanentRedirect || redirect.Header().Get("Location") != nashttp.PathDashboard {
		t.Fatalf("/ui/: %d to %q, want 308 to %s", redirect.Code, redirect.Header().Get("Location"), nashttp.PathDashboard)
	}
	// Nor does a NAS without an operator token.
	off := setup(t, func(c *nas.Config, _ *nas.Options) { c.OperatorToken = "" })
	for _, p := range []string{"/ui", contract.PathOperatorOverview} {
		if rec := off.do(off.internal, request{method: "GET", path: p}); rec.Code != 404 {
			t.Fatalf("%s without operator token: %d", p, rec.Code)
		}
	}
	if rec := off.do(off.internal, request{method: "POST", path: contract.PathOperatorSession, body: contract.OperatorSessionRequest{Token: "x"}, header: sameOriginHeader}); rec.Code != 404 {
		t.Fatalf("login without operator token: %d", rec.Code)
	}
}
