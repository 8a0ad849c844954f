package hermese2e

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// offsetSpelling is how a Hermes agent writes fire_at: Python's isoformat()
// of an aware datetime, a +hh:mm offset and never Z.
var offsetSpelling = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{6})?[+-]\d\d:\d\d$`)

// instant parses an RFC 3339 fire_at.
func instant(t *testing.T, s string) time.Time {
	t.Helper()
	at, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("fire_at %q: %v", s, err)
	}
	return at
}

// checkFireToken fails unless the agent accepted fire e after PyJWT verified
// its token: signed ES256 (NAS's default algorithm, which Hermes' verifier
// allows), for audience, issued by NAS for the cron_fire purpose.
func checkFireToken(t *testing.T, e message, audience, issuer string) {
	t.Helper()
	if e.Status != http.StatusAccepted || e.Outcome != "accepted" {
		t.Errorf("fire of %s (fire_at %s, attempt %d) answered %d %s %s, want 202 accepted", e.JobID, e.FireAt, e.Attempt, e.Status, e.Outcome, e.Reason)
		return
	}
	if e.Alg != "ES256" {
		t.Errorf("fire of %s was signed %s; with no signing_alg configured NAS must sign ES256", e.JobID, e.Alg)
	}
	if fmt.Sprint(e.Aud) != audience || e.Iss != issuer || e.Purpose != "cron_fire" {
		t.Errorf("fire of %s: aud %v iss %q purpose %q, want aud %q iss %q purpose cron_fire", e.JobID, e.Aud, e.Iss, e.Purpose, audience, issuer)
	}
}

// rearmFailed reports a recurring job the agent could not arm again.
func rearmFailed(evs []message) string {
	for _, e := range evs {
		if e.Event == "rearm_failed" {
			return fmt.Sprintf("re-arming %s after its run failed: %s", e.JobID, e.Error)
		}
	}
	return refusedByVerifier(evs)
}

// TestProvisionListCancelUpsertOnDefaults is the first "done when" of the
// Hermes drop-in: with a NAS configuration that names no algorithm, a client
// and verifier that behave as Hermes' do provision, list, cancel and upsert,
// and every fire is verified by PyJWT and accepted.
func TestProvisionListCancelUpsertOnDefaults(t *testing.T) {
	t.Parallel()
	provisionListCancelUpsert(t, nasOptions{})
}

// TestProvisionListCancelUpsertOnPostgres is the same on a NAS whose store
// is PostgreSQL (a schema of its own, which NAS migrates at start): the
// agent is served exactly as on the embedded store.
func TestProvisionListCancelUpsertOnPostgres(t *testing.T) {
	t.Parallel()
	provisionListCancelUpsert(t, nasOptions{store: postgresStore(t)})
}

// provisionListCancelUpsert is the scenario of
// TestProvisionListCancelUpsertOnDefaults on a NAS started with o.
func provisionListCancelUpsert(t *testing.T, o nasOptions) {
	n := startNAS(t, o)
	h := startHermes(t, n.agentFor(0))
	aud := "agent:" + instanceID

	// Due a few seconds ahead (whole seconds round down), so that the
	// changes and the list below come first even on a loaded machine.
	brief := h.addJob("daily-brief", 3*time.Second, 120, false, 1)          // …+02:00, then every second
	sweep := h.addJob("inbox-sweep", 3*time.Second, -330, true, 0)          // …-05:30 with microseconds
	stale := h.addJob("stale-reminder", 2500*time.Millisecond, 0, false, 0) // …+00:00
	for _, r := range []message{brief, sweep, stale} {
		if !offsetSpelling.MatchString(r.FireAt) {
			t.Fatalf("the agent sent fire_at %q, want Python's +hh:mm spelling", r.FireAt)
		}
		if r.ScheduleID == "" {
			t.Fatalf("provision of fire_at %s answered no schedule_id", r.FireAt)
		}
	}
	// The same fire_at again (same dedup_key) is an idempotent upsert.
	again := h.mustCall("add_job", map[string]any{"job_id": "inbox-sweep", "fire_at": sweep.FireAt})
	if again.ScheduleID != sweep.ScheduleID {
		t.Fatalf("provisioning inbox-sweep at the same fire_at gave schedule %s, then %s", sweep.ScheduleID, again.ScheduleID)
	}
	// Another fire_at moves the job: one armed one-shot per job.
	moved := h.addJob("inbox-sweep", 4*time.Second, 345, true, 0) // …+05:45, a second after the old slot
	// Removing a job makes the agent's reconcile cancel it.
	rm := h.mustCall("remove_job", map[string]any{"job_id": "stale-reminder"})
	if !slices.Equal(rm.Cancelled, []string{"stale-reminder"}) || len(rm.Provisioned) != 0 || len(rm.Errors) != 0 {
		t.Fatalf("removing stale-reminder: cancelled %v, provisioned %v, errors %v", rm.Cancelled, rm.Provisioned, rm.Errors)
	}

	page := h.list()
	if page.NextCursor != nil {
		t.Errorf("list of 2 armed jobs has next_cursor %q", *page.NextCursor)
	}
	armed := page.armedAt()
	want := map[string]string{"daily-brief": brief.FireAt, "inbox-sweep": moved.FireAt}
	if len(armed) != len(want) {
		t.Fatalf("list armed %v, want %v", armed, want)
	}
	for job, at := range want {
		if got, ok := armed[job]; !ok || !instant(t, got).Equal(instant(t, at)) {
			t.Fatalf("list has %s at %q, want the instant %s", job, got, at)
		}
	}

	h.waitFor("two runs of daily-brief, each re-armed, and one of the moved inbox-sweep", 20*time.Second, rearmFailed,
		func(evs []message) (bool, string) {
			b, re, s := count(evs, "run", "daily-brief"), count(evs, "rearmed", "daily-brief"), count(evs, "run", "inbox-sweep")
			return b >= 2 && re >= 2 && s >= 1, fmt.Sprintf("daily-brief ran %d times (re-armed %d), inbox-sweep %d", b, re, s)
		})
	// Every fire before the removal was accepted; one of daily-brief (due
	// every second) may arrive as it is removed and be answered gone.
	for _, f := range fires(h.snapshot(), "") {
		checkFireToken(t, f, aud, n.publicURL)
	}
	rm = h.mustCall("remove_job", map[string]any{"job_id": "daily-brief"})
	if !slices.Equal(rm.Cancelled, []string{"daily-brief"}) {
		t.Fatalf("removing daily-brief cancelled %v", rm.Cancelled)
	}

	evs := h.snapshot()
	// daily-brief fires every second until it is removed, so how many of its
	// slots ran before the removal depends on timing (at least the two
	// waited for); each must be the next slot, once.
	first := instant(t, brief.FireAt)
	briefSlots := []time.Time{first, first.Add(time.Second)}
	for n := len(runs(evs, "daily-brief")); len(briefSlots) < n; {
		briefSlots = append(briefSlots, first.Add(time.Duration(len(briefSlots))*time.Second))
	}
	wantRuns := map[string][]time.Time{
		"daily-brief": briefSlots,
		"inbox-sweep": {instant(t, moved.FireAt)},
	}
	for job, slots := range wantRuns {
		rs := runs(evs, job)
		if len(rs) != len(slots) {
			t.Errorf("%s ran %d times, want %d", job, len(rs), len(slots))
			continue
		}
		for i, r := range rs {
			if !instant(t, r.FireAt).Equal(slots[i]) {
				t.Errorf("run %d of %s was the slot %s, want %s", i+1, job, r.FireAt, slots[i].Format(time.RFC3339Nano))
			}
		}
	}
	// Both were due before inbox-sweep's new slot, which has run: a cancelled
	// job and a moved job's old slot never fire.
	if fs := fires(evs, "stale-reminder"); len(fs) != 0 {
		t.Errorf("the cancelled stale-reminder fired %d times", len(fs))
	}
	for _, f := range fires(evs, "inbox-sweep") {
		if instant(t, f.FireAt).Equal(instant(t, sweep.FireAt)) {
			t.Errorf("inbox-sweep fired at its old slot %s after it was moved", sweep.FireAt)
		}
	}
	n.waitNothingArmed(t, n.agentTok)
	if dead := n.deadLetters(); len(dead) != 0 {
		t.Errorf("dead letter holds %+v, want nothing", dead)
	}
}

// TestFireRefusedOnceWith401IsRetried: a fire the agent answers 401 because
// its key set is cold (the first JWKS fetch fails, and Hermes' verifier
// answers 401 on any failure) is delivered on a retry and runs once.
func TestFireRefusedOnceWith401IsRetried(t *testing.T) {
	t.Parallel()
	fireRefusedOnceWith401IsRetried(t, "")
}

// TestFireRefusedOnceWith401IsRetriedOnPostgres is the same on a NAS whose
// store is PostgreSQL.
func TestFireRefusedOnceWith401IsRetriedOnPostgres(t *testing.T) {
	t.Parallel()
	fireRefusedOnceWith401IsRetried(t, postgresStore(t))
}

// fireRefusedOnceWith401IsRetried is the scenario of
// TestFireRefusedOnceWith401IsRetried on a NAS on store (empty: the embedded
// one).
func fireRefusedOnceWith401IsRetried(t *testing.T, store string) {
	n := startNAS(t, nasOptions{store: store})
	h := startHermes(t, n.agentFor(1))
	job := h.addJob("cold-wake", 2*time.Second, 60, false, 0) // …+01:00

	deadLettered := func([]message) string {
		for _, d := range n.deadLettersNow() {
			if d.JobID == "cold-wake" {
				return fmt.Sprintf("NAS dead-lettered the fire after %d attempt(s) (%s); a 401 must be retried", d.Attempts, d.Reason)
			}
		}
		return ""
	}
	h.waitPolling("cold-wake to run after a 401", 20*time.Second, deadLettered, func(evs []message) (bool, string) {
		return count(evs, "run", "cold-wake") >= 1, fmt.Sprintf("%d fires, no run", count(evs, "fire", "cold-wake"))
	})
	n.waitNothingArmed(t, n.agentTok)

	evs := h.snapshot()
	fs := fires(evs, "cold-wake")
	if len(fs) < 2 || fs[0].Status != http.StatusUnauthorized || !strings.Contains(fs[0].Reason, "key set") || fs[0].Attempt != 1 {
		t.Fatalf("want attempt 1 refused 401 by the cold key set, then a retry; fires:\n%s", h.dump())
	}
	accepted := 0
	for _, f := range fs[1:] {
		if f.Attempt < 2 {
			t.Errorf("a fire after the 401 has attempt %d, want a retry (2 or more)", f.Attempt)
		}
		checkFireToken(t, f, "agent:"+instanceID, n.publicURL)
		if f.Status == http.StatusAccepted {
			accepted++
		}
	}
	if accepted != 1 {
		t.Errorf("the retried fire was accepted %d times, want once", accepted)
	}
	rs := runs(evs, "cold-wake")
	if len(rs) != 1 || !instant(t, rs[0].FireAt).Equal(instant(t, job.FireAt)) {
		t.Errorf("cold-wake ran %d times (%v), want once at %s", len(rs), rs, job.FireAt)
	}
	if dead := n.deadLetters(); len(dead) != 0 {
		t.Errorf("dead letter holds %+v, want nothing", dead)
	}
}

// TestFireRefusedWith400IsDeadLetteredAndListed: a fire the agent answers 400
// goes to the dead letter at once (no retry) and stays in list's
// failed_fires, fire_at spelled as provisioned, however often an agent that
// ignores the field reads list; the ack removes it.
func TestFireRefusedWith400IsDeadLetteredAndListed(t *testing.T) {
	t.Parallel()
	fireRefusedWith400IsDeadLetteredAndListed(t, "")
}

// TestFireRefusedWith400IsDeadLetteredAndListedOnPostgres is the same on a
// NAS whose store is PostgreSQL.
func TestFireRefusedWith400IsDeadLetteredAndListedOnPostgres(t *testing.T) {
	t.Parallel()
	fireRefusedWith400IsDeadLetteredAndListed(t, postgresStore(t))
}

// fireRefusedWith400IsDeadLetteredAndListed is the scenario of
// TestFireRefusedWith400IsDeadLetteredAndListed on a NAS on store (empty: the
// embedded one).
func fireRefusedWith400IsDeadLetteredAndListed(t *testing.T, store string) {
	n := startNAS(t, nasOptions{store: store})
	h := startHermes(t, n.agentFor(0))
	h.mustCall("refuse", map[string]any{"job_id": "bad-payload", "status": http.StatusBadRequest})
	job := h.addJob("bad-payload", 2*time.Second, 180, true, 0) // …+03:00 with microseconds

	h.waitFor("the fire of bad-payload", 20*time.Second, refusedByVerifier, func(evs []message) (bool, string) {
		return count(evs, "fire", "bad-payload") >= 1, "no fire yet"
	})
	var dead deadLetter
	h.waitPolling("bad-payload in the dead letter (chronos dlq list)", 10*time.Second, nil, func([]message) (bool, string) {
		entries := n.deadLetters()
		for _, d := range entries {
			if d.JobID == "bad-payload" {
				dead = d
				return true, ""
			}
		}
		return false, fmt.Sprintf("dead letter %+v", entries)
	})
	if dead.ScheduleID != job.ScheduleID || dead.AgentID != agentID || dead.Attempts != 1 || !strings.Contains(dead.Reason, "400") ||
		!instant(t, dead.FireAt).Equal(instant(t, job.FireAt)) {
		t.Errorf("dead letter entry %+v, want schedule %s of %s at %s after 1 attempt, reason naming 400", dead, job.ScheduleID, agentID, job.FireAt)
	}
	if fs := fires(h.snapshot(), "bad-payload"); len(fs) != 1 || fs[0].Status != http.StatusBadRequest {
		t.Errorf("want exactly one delivery, answered 400; fires:\n%s", h.dump())
	}

	// Hermes reads list and ignores failed_fires: the fire stays reported.
	for read := 1; read <= 2; read++ {
		p := h.list()
		i := slices.IndexFunc(p.FailedFires, func(f failedFire) bool { return f.ScheduleID == job.ScheduleID })
		if i < 0 {
			t.Fatalf("read %d of list: failed_fires %+v lacks the dead-lettered fire (a read must not consume it)", read, p.FailedFires)
		}
		ff := p.FailedFires[i]
		if ff.JobID != "bad-payload" || ff.FireAt != job.FireAt || ff.Attempts != 1 || !strings.Contains(ff.Reason, "400") {
			t.Errorf("read %d of list: failed fire %+v, want job bad-payload, fire_at %q exactly as provisioned, 1 attempt, reason naming 400", read, ff, job.FireAt)
		}
	}

	// Acknowledged, it is gone; ids unknown to NAS are ignored.
	ack := func(want int) {
		t.Helper()
		code, body := call(http.MethodPost, n.publicURL+"/api/agent-cron/failed-fires/ack", n.agentTok,
			map[string]any{"schedule_ids": []string{job.ScheduleID, "sch_00000000000000000000000000000000"}})
		var got struct {
			OK           bool `json:"ok"`
			Acknowledged *int `json:"acknowledged"`
		}
		if code != http.StatusOK || json.Unmarshal(body, &got) != nil || !got.OK || got.Acknowledged == nil || *got.Acknowledged != want {
			t.Fatalf("failed-fires ack: %d %s, want 200 {\"ok\": true, \"acknowledged\": %d}", code, body, want)
		}
	}
	ack(1)
	if p := h.list(); len(p.FailedFires) != 0 {
		t.Errorf("failed_fires after the ack: %+v", p.FailedFires)
	}
	ack(0)
}

// TestListReturnsEveryArmedJobVerbatim: 105 armed jobs all come back in one
// list without limit, each fire_at byte-identical to what the agent sent, so
// a cold start re-provisions nothing and sees (and cancels) an orphan that
// sorts after all of them.
func TestListReturnsEveryArmedJobVerbatim(t *testing.T) {
	t.Parallel()
	listReturnsEveryArmedJobVerbatim(t, "")
}

// TestListReturnsEveryArmedJobVerbatimOnPostgres is the same on a NAS whose
// store is PostgreSQL.
func TestListReturnsEveryArmedJobVerbatimOnPostgres(t *testing.T) {
	t.Parallel()
	listReturnsEveryArmedJobVerbatim(t, postgresStore(t))
}

// listReturnsEveryArmedJobVerbatim is the scenario of
// TestListReturnsEveryArmedJobVerbatim on a NAS on store (empty: the embedded
// one).
func listReturnsEveryArmedJobVerbatim(t *testing.T, store string) {
	n := startNAS(t, nasOptions{store: store})
	h := startHermes(t, n.agentFor(0))

	offsets := []int{120, -330, 0, 345, -540, 840, -720, 330, 60, -60}
	sent := map[string]string{}
	for i := range 105 {
		id := fmt.Sprintf("job-%03d", i)
		r := h.addJob(id, time.Hour+time.Duration(i)*time.Minute, offsets[i%len(offsets)], i%3 == 0, 0)
		sent[id] = r.FireAt
	}
	// Armed once, no longer wanted, and last in job-id order.
	orphanAt := time.Now().Add(3 * time.Hour).In(time.FixedZone("", 3600)).Format("2006-01-02T15:04:05-07:00")
	if code, body := call(http.MethodPost, n.publicURL+"/api/agent-cron/provision", n.agentTok, map[string]any{
		"job_id": "zz-orphan", "fire_at": orphanAt, "agent_callback_url": h.callbackURL, "dedup_key": "zz-orphan:" + orphanAt,
	}); code != http.StatusOK {
		t.Fatalf("provision zz-orphan: %d %s", code, body)
	}
	sent["zz-orphan"] = orphanAt

	p := h.list()
	if p.NextCursor != nil {
		t.Errorf("list without limit has next_cursor %q; it must answer every armed job in one page", *p.NextCursor)
	}
	if len(p.Armed) != len(sent) {
		t.Errorf("list without limit answered %d of the %d armed jobs", len(p.Armed), len(sent))
	}
	armed := p.armedAt()
	var diff []string
	for id, at := range sent {
		switch got, ok := armed[id]; {
		case !ok:
			diff = append(diff, fmt.Sprintf("%s missing", id))
		case got != at:
			diff = append(diff, fmt.Sprintf("%s sent %s, listed %s", id, at, got))
		}
	}
	sort.Strings(diff)
	if len(diff) > 0 {
		t.Errorf("%d of %d armed jobs do not come back as sent, e.g.:\n  %s", len(diff), len(sent), strings.Join(diff[:min(len(diff), 5)], "\n  "))
	}

	// A cold start: one list, string comparison, provision what differs,
	// cancel what is not wanted.
	nasBefore, agentBefore := n.provisionCount(), h.mustCall("calls", nil).Calls
	rec := h.mustCall("reconcile", map[string]any{"cold": true})
	nasAfter, agentAfter := n.provisionCount(), h.mustCall("calls", nil).Calls
	if !rec.Listed || rec.Observed != len(sent) || len(rec.Errors) != 0 {
		t.Errorf("cold reconcile listed %v and observed %d armed jobs (errors %v), want one list of %d", rec.Listed, rec.Observed, rec.Errors, len(sent))
	}
	if len(rec.Provisioned) != 0 || nasAfter != nasBefore {
		t.Errorf("a cold start re-provisioned %d jobs (NAS answered %d provision calls), want none", len(rec.Provisioned), nasAfter-nasBefore)
	}
	if !slices.Equal(rec.Cancelled, []string{"zz-orphan"}) {
		t.Errorf("a cold start cancelled %v, want the orphan zz-orphan", rec.Cancelled)
	}
	if d := agentAfter["list"] - agentBefore["list"]; d != 1 {
		t.Errorf("the cold start read list %d times, want once", d)
	}
	final := h.list().armedAt()
	if _, ok := final["zz-orphan"]; ok || len(final) != 105 {
		t.Errorf("after the cold start %d jobs are armed (orphan still armed: %v), want the 105 wanted", len(final), ok)
	}
}

// issuer is a test identity provider: an RSA key and its JWKS on loopback,
// minting access tokens like a hosted agent's (bootstrap-style, with a
// session and no instance claim).
type issuer struct {
	url string
	kid string
	key *rsa.PrivateKey
}

func startIssuer(t *testing.T) *issuer {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	iss := &issuer{kid: randomToken(9), key: key}
	b64 := base64.RawURLEncoding.EncodeToString
	jwks, _ := json.Marshal(map[string]any{"keys": []map[string]string{{
		"kty": "RSA", "kid": iss.kid, "use": "sig", "alg": "RS256",
		"n": b64(key.N.Bytes()), "e": b64(big.NewInt(int64(key.E)).Bytes()),
	}}})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/.well-known/jwks.json" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(jwks)
	}))
	t.Cleanup(srv.Close)
	iss.url = srv.URL
	return iss
}

// mint signs claims RS256 with the issuer's key.
func (i *issuer) mint(t *testing.T, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, claims)
	tok.Header["kid"] = i.kid
	s, err := tok.SignedString(i.key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSessionTokenArmsJobsOfItsInstance: a hosted agent's access token (RS256;
// sub is the user, sid the bootstrap session, client_id, no instance claim)
// is mapped by the agents-file entry whose session_id is its sid, and the
// jobs it arms fire with aud agent:{that entry's instance_id}.
func TestSessionTokenArmsJobsOfItsInstance(t *testing.T) {
	t.Parallel()
	sessionTokenArmsJobsOfItsInstance(t, "")
}

// TestSessionTokenArmsJobsOfItsInstanceOnPostgres is the same on a NAS whose
// store is PostgreSQL.
func TestSessionTokenArmsJobsOfItsInstanceOnPostgres(t *testing.T) {
	t.Parallel()
	sessionTokenArmsJobsOfItsInstance(t, postgresStore(t))
}

// sessionTokenArmsJobsOfItsInstance is the scenario of
// TestSessionTokenArmsJobsOfItsInstance on a NAS on store (empty: the
// embedded one).
func sessionTokenArmsJobsOfItsInstance(t *testing.T, store string) {
	const (
		hostedAgent    = "hermes-hosted"
		hostedInstance = "inst-hosted-7"
		session        = "sess-8f2c1e4b"
		audience       = "chronos-nas"
	)
	iss := startIssuer(t)
	n := startNAS(t, nasOptions{
		agents: fmt.Sprintf("- agent_id: %s\n  instance_id: %s\n  session_id: %s\n", hostedAgent, hostedInstance, session),
		extra:  fmt.Sprintf("agent_jwt:\n  issuer: %s\n  jwks_url: %s/.well-known/jwks.json\n  audience: %s\n", iss.url, iss.url, audience),
		store:  store,
	})
	now := time.Now()
	accessToken := func(claims jwt.MapClaims) string {
		c := jwt.MapClaims{"iss": iss.url, "aud": audience, "iat": now.Unix(), "exp": now.Add(15 * time.Minute).Unix()}
		for k, v := range claims {
			c[k] = v
		}
		return iss.mint(t, c)
	}
	tokenFile := n.write("hosted-token", accessToken(jwt.MapClaims{"sub": "user-4821", "sid": session, "client_id": "hermes-cli"})+"\n")
	h := startHermes(t, agentOptions{portalURL: n.publicURL, jwksURL: n.jwksURL(), audience: "agent:" + hostedInstance, tokenFile: tokenFile})

	r := h.call("add_job", map[string]any{"job_id": "hosted-digest", "in_seconds": 2, "offset_minutes": 540}) // …+09:00
	if !r.OK {
		t.Fatalf("NAS refused the session token (%d %s): %s; the agents-file entry with session_id %s must map it to %s",
			r.Status, r.ErrorCode, r.Error, session, hostedInstance)
	}
	h.waitFor("the run of hosted-digest", 20*time.Second, refusedByVerifier, func(evs []message) (bool, string) {
		return count(evs, "run", "hosted-digest") >= 1, fmt.Sprintf("%d fires, no run", count(evs, "fire", "hosted-digest"))
	})
	evs := h.snapshot()
	for _, f := range fires(evs, "") {
		checkFireToken(t, f, "agent:"+hostedInstance, n.publicURL)
	}
	if rs := runs(evs, "hosted-digest"); len(rs) != 1 || !instant(t, rs[0].FireAt).Equal(instant(t, r.FireAt)) {
		t.Errorf("hosted-digest ran %v, want once at %s", rs, r.FireAt)
	}

	// A session no entry names is a well-formed token of no provisioned agent.
	stranger := accessToken(jwt.MapClaims{"sub": "user-4821", "sid": "sess-unknown", "client_id": "hermes-cli"})
	at := time.Now().Add(time.Hour).Format(time.RFC3339)
	code, body := call(http.MethodPost, n.publicURL+"/api/agent-cron/provision", stranger, map[string]any{
		"job_id": "x", "fire_at": at, "agent_callback_url": h.callbackURL, "dedup_key": "x:" + at,
	})
	var e struct {
		Error string `json:"error"`
	}
	if code != http.StatusForbidden || json.Unmarshal(body, &e) != nil || e.Error != "invalid_client" {
		t.Errorf("provision with an unmapped session: %d %s, want 403 invalid_client", code, body)
	}
	// A token that names its instance directly keeps working.
	direct := accessToken(jwt.MapClaims{"sub": "hermes-direct", "instance_id": "inst-direct"})
	if code, body := call(http.MethodGet, n.publicURL+"/api/agent-cron/list", direct, nil); code != http.StatusOK {
		t.Errorf("list with an instance_id token: %d %s, want 200", code, body)
	}
}

// TestDisabledAgentIsRefusedAsAnUnknownIdentity: an operator disables the
// agent with `chronos agent disable`; the Hermes client's provision and list
// then get 403 invalid_client (the answer it treats as "identity rejected"),
// its armed fire is not delivered while disabled, and after `chronos agent
// enable` the fire runs and the client's calls are served again.
func TestDisabledAgentIsRefusedAsAnUnknownIdentity(t *testing.T) {
	t.Parallel()
	disabledAgentIsRefusedAsAnUnknownIdentity(t, "")
}

// TestDisabledAgentIsRefusedAsAnUnknownIdentityOnPostgres is the same on a
// NAS whose store is PostgreSQL.
func TestDisabledAgentIsRefusedAsAnUnknownIdentityOnPostgres(t *testing.T) {
	t.Parallel()
	disabledAgentIsRefusedAsAnUnknownIdentity(t, postgresStore(t))
}

// disabledAgentIsRefusedAsAnUnknownIdentity is the scenario of
// TestDisabledAgentIsRefusedAsAnUnknownIdentity on a NAS on store (empty: the
// embedded one).
func disabledAgentIsRefusedAsAnUnknownIdentity(t *testing.T, store string) {
	n := startNAS(t, nasOptions{store: store})
	h := startHermes(t, n.agentFor(0))
	job := h.addJob("weekly-report", 3*time.Second, 60, false, 0)
	n.cli("agent", "disable", agentID, "--config", "nas.yaml")
	for _, c := range []struct {
		cmd  string
		args map[string]any
	}{
		{"add_job", map[string]any{"job_id": "another", "in_seconds": 60}},
		{"list", nil},
	} {
		r := h.call(c.cmd, c.args)
		if r.OK || r.Status != http.StatusForbidden || r.ErrorCode != "invalid_client" {
			t.Fatalf("%s of a disabled agent: ok %v, NAS status %d %q (%s); want 403 invalid_client", c.cmd, r.OK, r.Status, r.ErrorCode, r.Error)
		}
	}
	// Past its slot while disabled: no fire reaches the agent.
	time.Sleep(time.Until(instant(t, job.FireAt).Add(2 * time.Second))) // the slot passing is what is waited for
	if fs := fires(h.snapshot(), "weekly-report"); len(fs) != 0 {
		t.Fatalf("a disabled agent received %d fires", len(fs))
	}
	n.cli("agent", "enable", agentID, "--config", "nas.yaml")
	h.waitFor("the held fire to run after enable", 20*time.Second, rearmFailed, func(evs []message) (bool, string) {
		r := count(evs, "run", "weekly-report")
		return r == 1, fmt.Sprintf("weekly-report ran %d times", r)
	})
	h.mustCall("list", nil)
}
