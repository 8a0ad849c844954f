package e2e

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/chronoscron/chronos/agent/cronkeys"
	"github.com/chronoscron/chronos/agent/fireauth/fireauthtest"
	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/nas"
	"github.com/chronoscron/chronos/relay/cronkey"
)

// cronKeys reads the agent home's cron keys, as the agent keeps them.
func (s *system) cronKeys() map[string]*cronkeys.Job {
	s.t.Helper()
	b, err := os.ReadFile(filepath.Join(s.home, cronkeys.File))
	if err != nil {
		s.t.Fatalf("cron keys: %v", err)
	}
	var f struct {
		Jobs map[string]*cronkeys.Job `json:"jobs"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		s.t.Fatalf("cron keys: %v", err)
	}
	return f.Jobs
}

// currentKey returns the key the agent holds for job now, waiting for one.
func (s *system) currentKey(job string) cronkey.Key {
	s.t.Helper()
	var k cronkey.Key
	eventually(s.t, 15*time.Second, "the agent to hold a cron key for "+job, func() (bool, string) {
		j := s.cronKeys()[job]
		if j == nil || j.Current == nil {
			return false, "none"
		}
		var err error
		k, err = cronkey.Decode(j.Current.ID, j.Current.Key)
		return err == nil, "malformed"
	})
	return k
}

// allKeys returns every key the agent holds or held, unpadded base64url.
func (s *system) allKeys() []string {
	var out []string
	for _, j := range s.cronKeys() {
		if j.Current != nil {
			out = append(out, j.Current.Key)
		}
		for _, r := range j.Retired {
			out = append(out, r.Key)
		}
	}
	return out
}

// directToken signs a direct fire token for req under k, as a dispatcher
// does, with the body NAS would send.
func (s *system) directToken(k cronkey.Key, req contract.FireRequest) (string, []byte) {
	s.t.Helper()
	f := fireauthtest.NewFire(s.publicURL, "agent:"+instanceID, time.Now(), req)
	now := time.Now()
	c := &contract.FireClaims{
		TokenClaims: contract.TokenClaims{Issuer: s.publicURL, Audience: contract.Audience(instanceID), Purpose: contract.PurposeCronFire,
			IssuedAt: jwt.NewNumericDate(now), NotBefore: jwt.NewNumericDate(now),
			ExpiresAt: jwt.NewNumericDate(now.Add(contract.DirectTokenLifetimeSeconds * time.Second)), ID: "jti-" + randomToken(8)},
		JobID: req.JobID, FireAt: req.FireAt.String(), ScheduleID: req.ScheduleID, Attempt: req.Attempt, BodyHash: contract.BodyHash(f.Body),
	}
	tok, err := cronkey.Sign(k, c)
	if err != nil {
		s.t.Fatal(err)
	}
	return tok, f.Body
}

// assertNoKeyLeaked greps every process's output, NAS's list answer and the
// metrics pages for the agent's cron keys (current and retired).
func (s *system) assertNoKeyLeaked() {
	s.t.Helper()
	keys := s.allKeys()
	if len(keys) == 0 {
		s.t.Fatal("the agent holds no cron key to look for")
	}
	texts := map[string]string{}
	for _, p := range append(append([]*proc{s.nas}, s.relays...), s.agents...) {
		texts["output of "+p.name] = p.out.String()
	}
	_, list := httpGet(s.publicURL+contract.PathList, "Authorization", "Bearer "+s.agentToken)
	texts["NAS's list"] = list
	_, texts["NAS's metrics"] = httpGet(s.internalURL+"/metrics", "Authorization", "Bearer "+s.opToken)
	for i, u := range s.agentURLs {
		_, texts["metrics of agent "+string(rune('1'+i))] = httpGet(u + "/metrics")
	}
	for _, k := range keys {
		raw, err := base64.RawURLEncoding.DecodeString(k)
		if err != nil {
			s.t.Fatal(err)
		}
		for name, text := range texts {
			for _, form := range []string{k, base64.StdEncoding.EncodeToString(raw), base64.RawStdEncoding.EncodeToString(raw), string(raw)} {
				if strings.Contains(text, form) {
					s.t.Errorf("a cron key appears in the %s", name)
				}
			}
		}
	}
}

// TestDirectDeliveryWithoutNAS: on Redis, NAS arms an agent's direct jobs,
// then NAS is stopped; the chronos relay process alone delivers their
// fires, signed under each job's key, and the agent runs each slot once.
func TestDirectDeliveryWithoutNAS(t *testing.T) {
	t.Parallel()
	s := newSystem(t, systemOptions{Redis: true, Relays: 1, Direct: true})
	at := time.Now().Add(10 * time.Second).UTC().Truncate(time.Second)
	jobs := []string{"direct-a", "direct-b", "direct-c"}
	for _, j := range jobs {
		s.addJob(j, at.Format(time.RFC3339))
	}
	for _, j := range jobs {
		if a := s.armed(j); a.Delivery != contract.DeliveryDirect || !a.FireAt.Time.Equal(at) {
			t.Fatalf("NAS lists %s as %+v, want a direct fire at %s", j, a, at)
		}
		s.currentKey(j)
	}
	s.nas.kill()
	eventually(t, 40*time.Second, "every direct fire to run", func() (bool, string) {
		var missing []string
		for _, j := range jobs {
			if rs := s.runsOf(j)[at]; len(rs) == 0 || rs[0].state != "succeeded" {
				missing = append(missing, j)
			}
		}
		return len(missing) == 0, strings.Join(missing, ",")
	})
	keys := s.cronKeys()
	for _, j := range jobs {
		runs := s.runsOf(j)
		if len(runs) != 1 || len(runs[at]) != 1 || runs[at][0].state != "succeeded" {
			t.Errorf("%s ran %+v, want one succeeded run of slot %s", j, runs, at)
		}
		for _, f := range s.proxy.records() {
			if f.job == j && f.path == contract.PathFire && (keys[j] == nil || keys[j].Current == nil || f.kid != keys[j].Current.ID) {
				t.Errorf("a fire of %s came with kid %q, not its cron key's id", j, f.kid)
			}
		}
	}
	if s.nas.running() {
		t.Fatal("NAS was running")
	}
	s.assertNoKeyLeaked()
}

// TestDirectFireRefusals: the serving agent answers 401 and runs nothing
// for a direct token under another job's key, under a key it never held,
// under a retired key past its last slot, with alg none, and for a token
// NAS signed for a direct job; a token under the job's own key (or its
// retired key for the slot armed under it) passes verification and meets
// the slot check (425, the slot is far).
func TestDirectFireRefusals(t *testing.T) {
	t.Parallel()
	s := newSystem(t, systemOptions{Direct: true})
	alpha, beta := s.addJob("alpha", "in 900h"), s.addJob("beta", "in 900h")
	armed := s.armed(alpha)
	if armed.Delivery != contract.DeliveryDirect {
		t.Fatalf("alpha is armed %+v, want direct", armed)
	}
	ka, kb := s.currentKey(alpha), s.currentKey(beta)
	stranger, _ := cronkey.Mint()
	strangerWithKID := cronkey.Key{ID: ka.ID, Secret: stranger.Secret}
	req := contract.FireRequest{JobID: alpha, FireAt: armed.FireAt, ScheduleID: armed.ScheduleID, Attempt: 1}
	agent := s.agentURLs[0]

	type try struct {
		name  string
		token func() (string, []byte)
		want  int
	}
	sign := func(k cronkey.Key, r contract.FireRequest) func() (string, []byte) {
		return func() (string, []byte) { return s.directToken(k, r) }
	}
	tries := []try{
		{"another job's key", sign(kb, req), http.StatusUnauthorized},
		{"a key the agent never held, under the job's key id", sign(strangerWithKID, req), http.StatusUnauthorized},
		{"a key the agent never held", sign(stranger, req), http.StatusUnauthorized},
		{"alg none", func() (string, []byte) {
			tok, body := s.directToken(ka, req)
			parts := strings.Split(tok, ".")
			hdr := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"` + contract.TokenTypeCronFire + `","kid":"` + ka.ID + `"}`))
			return hdr + "." + parts[1] + ".", body
		}, http.StatusUnauthorized},
		{"the job's own key", sign(ka, req), http.StatusTooEarly},
	}
	for _, tc := range tries {
		tok, body := tc.token()
		if code, _, answer := postFire(t, agent, tok, body); code != tc.want {
			t.Errorf("%s: the agent answered %d %s, want %d", tc.name, code, answer, tc.want)
		}
	}

	// A token NAS's own key signs for the direct job, as NAS signs fires
	// of mediated jobs.
	ring, err := nas.OpenKeyRing(filepath.Join(s.dir, "keys"), "ES256")
	if err != nil {
		t.Fatal(err)
	}
	fire := fireauthtest.NewFire(s.publicURL, "agent:"+instanceID, time.Now(), req)
	nasToken, err := (&nas.Minter{Keys: ring, Issuer: s.publicURL, TTL: time.Minute}).Mint(time.Now(),
		nas.FireToken{InstanceID: instanceID, Fire: req, Body: fire.Body})
	if err != nil {
		t.Fatal(err)
	}
	if code, _, answer := postFire(t, agent, nasToken, fire.Body); code != http.StatusUnauthorized {
		t.Errorf("a NAS token for the direct job: the agent answered %d %s, want 401", code, answer)
	}

	// Re-key while alpha is armed: the agent gets a new key; the old one
	// still verifies the slot armed under it, and nothing later.
	s.mustCLI("agent", "rekey", agentID, "--nas-url", s.internalURL, "--operator-token", s.opToken)
	var fresh cronkey.Key
	eventually(t, 20*time.Second, "alpha's key to be replaced", func() (bool, string) {
		fresh = s.currentKey(alpha)
		return fresh.ID != ka.ID, fresh.ID
	})
	later := req
	later.FireAt = contract.NewTime(armed.FireAt.Time.Add(time.Hour))
	for _, tc := range []try{
		{"the retired key, for the slot armed under it", sign(ka, req), http.StatusTooEarly},
		{"the retired key, for a later slot", sign(ka, later), http.StatusUnauthorized},
		{"the new key", sign(fresh, req), http.StatusTooEarly},
	} {
		tok, body := tc.token()
		if code, _, answer := postFire(t, agent, tok, body); code != tc.want {
			t.Errorf("%s: the agent answered %d %s, want %d", tc.name, code, answer, tc.want)
		}
	}
	if lines := readLedger(t, s.home); len(lines) != 0 {
		t.Errorf("the ledger has %d lines, want none: %+v", len(lines), lines)
	}
	s.assertNoKeyLeaked()
}

// TestDirectRekeyWhileArmedLosesNothing: on Redis with a relay process, an
// operator re-keys an agent whose interval jobs are armed and firing;
// every slot of the span runs exactly once and the fires after the re-key
// come under the new keys.
func TestDirectRekeyWhileArmedLosesNothing(t *testing.T) {
	t.Parallel()
	s := newSystem(t, systemOptions{Redis: true, Relays: 1, Direct: true})
	jobs := []string{"tick-a", "tick-b"}
	start := time.Now()
	for _, j := range jobs {
		s.addJob(j, "every 2s")
	}
	old := map[string]string{}
	for _, j := range jobs {
		old[j] = s.currentKey(j).ID
	}
	eventually(t, 20*time.Second, "a fire of each job under its first key", func() (bool, string) {
		for _, j := range jobs {
			if len(s.runsOf(j)) == 0 {
				return false, j
			}
		}
		return true, ""
	})
	s.mustCLI("agent", "rekey", agentID, "--nas-url", s.internalURL, "--operator-token", s.opToken)
	rekeyed := time.Now()
	// Two slots of each job under its new key, the second 4 s after the
	// re-key at the earliest.
	eventually(t, 30*time.Second, "fires under the new keys", func() (bool, string) {
		for _, j := range jobs {
			n := 0
			for _, f := range s.proxy.records() {
				if f.job == j && f.path == contract.PathFire && f.status/100 == 2 && f.kid != old[j] && f.fireAt.After(rekeyed.Add(2*time.Second)) {
					n++
				}
			}
			if n < 2 {
				return false, j
			}
		}
		return true, ""
	})
	to := time.Now().Add(-3 * time.Second)
	for _, j := range jobs {
		jr := readJobs(t, s.home)[j]
		want := slotsBetween(t, jr, start, to)
		assertOncePerSlot(t, foldRuns(readLedger(t, s.home)), j, want, to)
	}
	for _, f := range s.proxy.records() {
		if f.path == contract.PathFire && f.status == http.StatusUnauthorized {
			t.Errorf("a fire was refused 401 around the re-key: %+v", f)
		}
	}
	s.assertNoKeyLeaked()
}
