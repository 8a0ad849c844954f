package nas_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/nas"
)

var allAlgs = []string{nas.AlgEdDSA, nas.AlgES256, nas.AlgRS256}

func TestKeysPEMRoundTrip(t *testing.T) {
	t.Parallel()
	for _, alg := range allAlgs {
		t.Run(alg, func(t *testing.T) {
			t.Parallel()
			k, err := nas.GenerateKey(alg)
			if err != nil {
				t.Fatal(err)
			}
			pemBytes, err := k.MarshalPEM()
			if err != nil {
				t.Fatal(err)
			}
			back, err := nas.ParseKeyPEM(pemBytes)
			if err != nil {
				t.Fatal(err)
			}
			if back.KID != k.KID || back.Alg != alg || len(k.KID) != 32 || strings.HasPrefix(k.KID, "-") {
				t.Fatalf("round trip: kid %s/%s alg %s", back.KID, k.KID, back.Alg)
			}
			// The JWK parses as a key set and verifies the key's tokens.
			set, err := nas.NewKeySet([]*nas.SigningKey{k}, "", alg)
			if err != nil {
				t.Fatal(err)
			}
			tok := mint(t, nas.NewKeyRing(set))
			if _, err := verifyWith(t, set.JWKS(), tok); err != nil {
				t.Fatalf("verify: %v", err)
			}
			var jwks contract.JWKS
			if err := json.Unmarshal(set.JWKS(), &jwks); err != nil || jwks.Keys[0].Alg != alg || jwks.Keys[0].Use != "sig" {
				t.Fatalf("jwks %s: %v", set.JWKS(), err)
			}
		})
	}
}

func TestKeysParseRefusesJunk(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"", "not pem", "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"} {
		if _, err := nas.ParseKeyPEM([]byte(in)); err == nil {
			t.Errorf("%q parsed", in)
		}
	}
}

func mint(t testing.TB, ring *nas.KeyRing) string {
	t.Helper()
	m := &nas.Minter{Keys: ring, Issuer: "https://nas.test", TTL: 90 * time.Second}
	body := []byte(`{"job_id":"j","fire_at":"2026-01-01T00:00:00Z","schedule_id":"s","attempt":1}`)
	tok, err := m.Mint(time.Now(), nas.FireToken{InstanceID: "i", Fire: contract.FireRequest{JobID: "j", FireAt: contract.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)), ScheduleID: "s", Attempt: 1}, Body: body})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func verifyWith(t *testing.T, jwks []byte, tok string) (*contract.FireClaims, error) {
	t.Helper()
	kf, err := keyfunc.NewJWKSetJSON(jwks)
	if err != nil {
		t.Fatal(err)
	}
	var c contract.FireClaims
	_, err = jwt.NewParser(jwt.WithValidMethods([]string{"EdDSA", "ES256", "RS256"}), jwt.WithExpirationRequired()).ParseWithClaims(tok, &c, kf.Keyfunc)
	return &c, err
}

func writeKey(t *testing.T, dir, alg string, mtime time.Time) *nas.SigningKey {
	t.Helper()
	k, err := nas.GenerateKey(alg)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := k.MarshalPEM()
	p := filepath.Join(dir, k.KID+".pem")
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, mtime, mtime); err != nil {
		t.Fatal(err)
	}
	return k
}

func kidOf(t *testing.T, tok string) string {
	t.Helper()
	parsed, _, err := jwt.NewParser().ParseUnverified(tok, jwt.MapClaims{})
	if err != nil {
		t.Fatal(err)
	}
	return parsed.Header["kid"].(string)
}

// TestKeysRotation walks the documented procedure: the next key is published
// before it signs, so a verifier that fetched the JWKS after publication
// accepts the first token signed with it.
func TestKeysRotation(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	base := time.Now().Add(-time.Hour)
	current := writeKey(t, dir, nas.AlgEdDSA, base)
	ring, err := nas.OpenKeyRing(dir, nas.AlgEdDSA)
	if err != nil {
		t.Fatal(err)
	}
	before := ring.Current().JWKS()
	if kid := kidOf(t, mint(t, ring)); kid != current.KID {
		t.Fatalf("signing kid %s, want %s", kid, current.KID)
	}

	// Step 1: generate the next key. It is published at once but does not
	// sign (without an active file the oldest key signs).
	next := writeKey(t, dir, nas.AlgEdDSA, base.Add(time.Minute))
	if changed, err := ring.Reload(); err != nil || !changed {
		t.Fatalf("reload: %v %v", changed, err)
	}
	published := ring.Current().JWKS()
	if kid := kidOf(t, mint(t, ring)); kid != current.KID {
		t.Fatalf("the next key signs before it is active: %s", kid)
	}
	if len(ring.Current().Published) != 2 {
		t.Fatalf("published %d keys", len(ring.Current().Published))
	}

	// Step 2: switch the active key.
	if err := os.WriteFile(filepath.Join(dir, nas.ActiveKeyFile), []byte(next.KID+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if changed, err := ring.Reload(); err != nil || !changed {
		t.Fatalf("reload: %v %v", changed, err)
	}
	tok := mint(t, ring)
	if kidOf(t, tok) != next.KID {
		t.Fatal("the active file did not switch the signing key")
	}
	// A verifier holding the JWKS from after publication accepts it; one
	// holding the JWKS from before does not.
	if _, err := verifyWith(t, published, tok); err != nil {
		t.Fatalf("a token of the published next key does not verify: %v", err)
	}
	if _, err := verifyWith(t, before, tok); err == nil {
		t.Fatal("a token of an unpublished key verified")
	}

	// An unchanged dir is not re-read; a broken one keeps the old set.
	if changed, err := ring.Reload(); err != nil || changed {
		t.Fatalf("unchanged reload: %v %v", changed, err)
	}
	if err := os.WriteFile(filepath.Join(dir, nas.ActiveKeyFile), []byte("no-such-kid"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ring.Reload(); err == nil {
		t.Fatal("an active file naming no key loaded")
	}
	if ring.Current().Active.KID != next.KID {
		t.Fatal("a failed reload replaced the key set")
	}
}

func TestKeySetErrors(t *testing.T) {
	t.Parallel()
	ed, _ := nas.GenerateKey(nas.AlgEdDSA)
	tests := []struct {
		name   string
		keys   []*nas.SigningKey
		active string
		alg    string
	}{
		{name: "no keys", alg: nas.AlgEdDSA},
		{name: "no key of the algorithm", keys: []*nas.SigningKey{ed}, alg: nas.AlgES256},
		{name: "active of another algorithm", keys: []*nas.SigningKey{ed}, active: ed.KID, alg: nas.AlgRS256},
		{name: "unknown active", keys: []*nas.SigningKey{ed}, active: "x", alg: nas.AlgEdDSA},
	}
	for _, tt := range tests {
		if _, err := nas.NewKeySet(tt.keys, tt.active, tt.alg); err == nil {
			t.Errorf("%s: no error", tt.name)
		}
	}
	if _, err := nas.LoadKeyDir(t.TempDir(), nas.AlgEdDSA); err == nil {
		t.Error("an empty dir loaded")
	}
}

// TestEphemeralKeyRingPublishesNext pins that a NAS without a keys dir still
// publishes a current and a next key, and signs with the current one only.
func TestEphemeralKeyRingPublishesNext(t *testing.T) {
	t.Parallel()
	for _, alg := range allAlgs {
		t.Run(alg, func(t *testing.T) {
			t.Parallel()
			ring, err := nas.NewEphemeralKeyRing(alg)
			if err != nil {
				t.Fatal(err)
			}
			set := ring.Current()
			if len(set.Published) != 2 || set.Published[0].KID == set.Published[1].KID {
				t.Fatalf("published %d keys, want a current and a next one", len(set.Published))
			}
			var jwks contract.JWKS
			if err := json.Unmarshal(set.JWKS(), &jwks); err != nil {
				t.Fatal(err)
			}
			kids := map[string]bool{}
			for _, k := range jwks.Keys {
				if k.Alg != alg {
					t.Fatalf("JWK %s is %s, want %s", k.Kid, k.Alg, alg)
				}
				kids[k.Kid] = true
			}
			if len(kids) != 2 || !kids[set.Active.KID] || set.Active.Alg != alg {
				t.Fatalf("JWKS %s does not hold the signing key %s", set.JWKS(), set.Active.KID)
			}
		})
	}
}

// TestKeysAlgorithmChange follows docs/key-rotation.md for a new signing_alg:
// a key of the new algorithm is published at once, a reload that makes it
// active under the old signing_alg keeps the previous keys, and a ring opened
// with the new signing_alg (the restart) signs with it.
func TestKeysAlgorithmChange(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	base := time.Now().Add(-time.Hour)
	old := writeKey(t, dir, nas.AlgEdDSA, base)
	ring, err := nas.OpenKeyRing(dir, nas.AlgEdDSA)
	if err != nil {
		t.Fatal(err)
	}
	next := writeKey(t, dir, nas.AlgES256, base.Add(time.Minute))
	if _, err := ring.Reload(); err != nil {
		t.Fatal(err)
	}
	if n := len(ring.Current().Published); n != 2 {
		t.Fatalf("published %d keys, want the EdDSA and the ES256 one", n)
	}
	if kid := kidOf(t, mint(t, ring)); kid != old.KID {
		t.Fatalf("signing kid %s, want %s", kid, old.KID)
	}
	if err := os.WriteFile(filepath.Join(dir, nas.ActiveKeyFile), []byte(next.KID+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ring.Reload(); err == nil {
		t.Fatal("an ES256 active key loaded under signing_alg EdDSA")
	}
	if kid := kidOf(t, mint(t, ring)); kid != old.KID {
		t.Fatalf("a refused reload changed the signing key to %s", kid)
	}
	restarted, err := nas.OpenKeyRing(dir, nas.AlgES256)
	if err != nil {
		t.Fatal(err)
	}
	tok := mint(t, restarted)
	if kidOf(t, tok) != next.KID {
		t.Fatal("the restart with signing_alg ES256 does not sign with the new key")
	}
	if _, err := verifyWith(t, ring.Current().JWKS(), tok); err != nil {
		t.Fatalf("the new key's token does not verify against the JWKS published before the switch: %v", err)
	}
}

// TestKeysUnsetAlgFollowsTheDir pins what signs when signing_alg is not set:
// the key `active` names whatever its algorithm (a dir made for the former
// EdDSA default keeps signing as before), else the oldest ES256 key, else
// the oldest EdDSA key, else RS256.
func TestKeysUnsetAlgFollowsTheDir(t *testing.T) {
	t.Parallel()
	base := time.Now().Add(-time.Hour)
	tests := []struct {
		name   string
		algs   []string // written oldest first
		active int      // index of the key `active` names; -1 for no file
		want   int      // index of the key that signs
	}{
		{"EdDSA dir with active", []string{nas.AlgEdDSA, nas.AlgEdDSA}, 1, 1},
		{"EdDSA dir without active", []string{nas.AlgEdDSA, nas.AlgEdDSA}, -1, 0},
		{"ES256 preferred without active", []string{nas.AlgEdDSA, nas.AlgES256, nas.AlgES256}, -1, 1},
		{"active EdDSA beside ES256", []string{nas.AlgES256, nas.AlgEdDSA}, 1, 1},
		{"RS256 only", []string{nas.AlgRS256}, -1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			var keys []*nas.SigningKey
			for i, alg := range tt.algs {
				keys = append(keys, writeKey(t, dir, alg, base.Add(time.Duration(i)*time.Minute)))
			}
			if tt.active >= 0 {
				if err := os.WriteFile(filepath.Join(dir, nas.ActiveKeyFile), []byte(keys[tt.active].KID+"\n"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			ring, err := nas.OpenKeyRing(dir, "")
			if err != nil {
				t.Fatal(err)
			}
			want := keys[tt.want]
			if ring.Alg() != want.Alg || kidOf(t, mint(t, ring)) != want.KID {
				t.Fatalf("signs with %s (%s), want %s (%s)", ring.Current().Active.KID, ring.Alg(), want.KID, want.Alg)
			}
			if _, err := verifyWith(t, ring.Current().JWKS(), mint(t, ring)); err != nil {
				t.Fatalf("token does not verify: %v", err)
			}
		})
	}
	// The algorithm found at open is kept: a later `active` naming a key of
	// another algorithm is refused as under an explicit signing_alg.
	dir := t.TempDir()
	ed := writeKey(t, dir, nas.AlgEdDSA, base)
	ring, err := nas.OpenKeyRing(dir, "")
	if err != nil || ring.Alg() != nas.AlgEdDSA {
		t.Fatalf("open: %v %v", ring, err)
	}
	es := writeKey(t, dir, nas.AlgES256, base.Add(time.Minute))
	if err := os.WriteFile(filepath.Join(dir, nas.ActiveKeyFile), []byte(es.KID+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ring.Reload(); err == nil {
		t.Fatal("a reload switched the algorithm found at open")
	}
	if ring.Current().Active.KID != ed.KID || ring.Alg() != nas.AlgEdDSA {
		t.Fatal("a refused reload changed the signing key")
	}
}

// TestKeysDirPermissions: a keys dir, key file or active file that group or
// others may write is refused at load and at reload (a chmod alone is
// noticed), with an error naming the path; the previous keys stay in use.
func TestKeysDirPermissions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		chmod func(dir string, k *nas.SigningKey) string // returns the path made loose
	}{
		{"world-writable dir", func(dir string, _ *nas.SigningKey) string { return chmod(t, dir, 0o777) }},
		{"group-writable dir", func(dir string, _ *nas.SigningKey) string { return chmod(t, dir, 0o770) }},
		{"world-writable key", func(dir string, k *nas.SigningKey) string { return chmod(t, filepath.Join(dir, k.KID+".pem"), 0o606) }},
		{"group-writable key", func(dir string, k *nas.SigningKey) string { return chmod(t, filepath.Join(dir, k.KID+".pem"), 0o620) }},
		{"writable active file", func(dir string, k *nas.SigningKey) string {
			p := filepath.Join(dir, nas.ActiveKeyFile)
			if err := os.WriteFile(p, []byte(k.KID), 0o600); err != nil {
				t.Fatal(err)
			}
			return chmod(t, p, 0o666)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), "keys")
			if err := os.Mkdir(dir, 0o755); err != nil { // readable by all is fine
				t.Fatal(err)
			}
			k := writeKey(t, dir, nas.AlgES256, time.Now().Add(-time.Hour))
			chmod(t, filepath.Join(dir, k.KID+".pem"), 0o644)
			ring, err := nas.OpenKeyRing(dir, "")
			if err != nil {
				t.Fatalf("a dir no one else can write was refused: %v", err)
			}
			loose := tt.chmod(dir, k)
			if _, err := ring.Reload(); err == nil || !strings.Contains(err.Error(), loose) || !strings.Contains(err.Error(), "chmod go-w") {
				t.Fatalf("reload after making %s loose: %v", loose, err)
			}
			if ring.Current().Active.KID != k.KID {
				t.Fatal("a refused reload replaced the keys")
			}
			if _, err := nas.OpenKeyRing(dir, ""); err == nil {
				t.Fatal("a loose keys dir opened")
			}
		})
	}
}

func chmod(t *testing.T, path string, mode os.FileMode) string {
	t.Helper()
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
	return path
}
