package fireauth

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/chronoscron/chronos/contract"
)

// Direct delivery. A relay dispatcher that delivers a job's fire without
// NAS signs its token with HS256 under the job's cron key, which NAS minted
// at provision and returned to the agent; the token's kid names the key,
// and its claims are those of a NAS token. A DirectVerifier sits in front
// of the NAS verifier in the same fire handler and tells the two apart by
// the header's alg alone:
//
//   - alg HS256: a direct token. Parsed unverified only to find its kid
//     and job_id (which must be the body's), it is verified with the key of
//     that id among the keys of that job and with nothing else, HS256 only,
//     and then checked as a NAS token is (iss, aud, purpose, lifetime,
//     exp/nbf with the leeway and the clock skew, the body binding). A
//     retired key verifies only the tokens of slots up to the last one
//     armed under it.
//   - any other alg: a NAS token, handed to the NAS verifier, unless the
//     job it is for is delivered directly.
//
// Every refusal is the NAS verifier's 401 invalid_token: a key of another
// job, an unknown key, a retired key beyond its last slot, a NAS token for
// a direct job, a direct token for a job without keys, and a token whose
// alg is none or anything the key set does not sign with.

// CronKeys finds the cron keys of direct delivery (*cronkeys.Store).
type CronKeys interface {
	// Direct reports whether jobID is delivered directly now (it has a
	// current key).
	Direct(jobID string) bool
	// CronKey returns the key kid of jobID and, for a retired key, the
	// last fire_at it verifies (zero for the current key), or ok false.
	CronKey(ctx context.Context, jobID, kid string) (secret []byte, validThrough time.Time, ok bool)
}

// NASVerifier is the verifier of NAS's own tokens a DirectVerifier falls
// back to (*JWTVerifier).
type NASVerifier interface {
	VerifyFire(ctx context.Context, token string, body []byte, req contract.FireRequest) error
	WaitReady(ctx context.Context) error
}

// DirectVerifier verifies the fire tokens of direct delivery and hands the
// others to the NAS verifier. It is safe for concurrent use.
type DirectVerifier struct {
	nas    NASVerifier
	keys   CronKeys
	check  *JWTVerifier // claims checks only: it holds no key set
	parser *jwt.Parser
	// nasHeaders holds the encoded headers of NAS tokens that verified, so
	// a NAS token is told from a direct one without decoding its header.
	nasHeaders headerCache
	// directHeaders holds the encoded headers of direct tokens that
	// verified (one per cron key), for the lean path.
	directHeaders headerCache
}

var directMethods = []string{contract.DirectTokenAlg}

// NewDirect returns a verifier of direct tokens under keys in front of nas.
// cfg gives the claims a direct token must carry, as for nas: Issuer
// (NAS's), Audience, Leeway, MaxLifetime, Now, Issued and Logger; its
// fetch settings are not used.
func NewDirect(nas NASVerifier, keys CronKeys, cfg Config) (*DirectVerifier, error) {
	if nas == nil || keys == nil {
		return nil, errors.New("fireauth: a direct verifier needs the NAS verifier and the cron keys")
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &DirectVerifier{
		nas:    nas,
		keys:   keys,
		check:  newVerifier(cfg),
		parser: jwt.NewParser(append(claimChecks(cfg), jwt.WithValidMethods(directMethods))...),
	}, nil
}

// WaitReady waits for the NAS verifier's key set; a direct token needs
// none (see WaitReadyFor).
func (v *DirectVerifier) WaitReady(ctx context.Context) error { return v.nas.WaitReady(ctx) }

// WaitReadyFor waits for what token needs to be verified: nothing for a
// direct token (NAS may be down altogether), NAS's key set for any other.
func (v *DirectVerifier) WaitReadyFor(ctx context.Context, token string) error {
	if v.isDirect(token) {
		return nil
	}
	return v.nas.WaitReady(ctx)
}

// Ready reports whether the NAS verifier's key set is loaded, when it
// says.
func (v *DirectVerifier) Ready() bool {
	if r, ok := v.nas.(interface{ Ready() bool }); ok {
		return r.Ready()
	}
	return true
}

// directHeaderPrefix is how the header of a token signed by cronkey.Sign
// starts once encoded: {"alg":"HS256", ... .
var directHeaderPrefix = "eyJhbGciOiJIUzI1NiIs"

// isDirect reports whether token's header says alg HS256. The header of
// the tokens the dispatchers sign is recognised by its encoded prefix, and
// the headers of NAS tokens that verified by the cache; any other is
// decoded.
func (v *DirectVerifier) isDirect(token string) bool {
	if strings.HasPrefix(token, directHeaderPrefix) {
		return true
	}
	hdr, _, ok := strings.Cut(token, ".")
	if !ok {
		return false
	}
	if _, nas := v.nasHeaders.get(hdr); nas {
		return false
	}
	return isDirect(token)
}

// isDirect reports whether token's header says alg HS256, decoding it.
func isDirect(token string) bool {
	if strings.HasPrefix(token, directHeaderPrefix) {
		return true
	}
	hdr, _, ok := strings.Cut(token, ".")
	if !ok {
		return false
	}
	h, ok := decodeAlg(hdr)
	return ok && h == contract.DirectTokenAlg
}

// decodeAlg returns the alg of an encoded header, as golang-jwt reads it.
func decodeAlg(seg string) (string, bool) {
	var h struct {
		Alg any `json:"alg"`
	}
	b, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil || json.Unmarshal(b, &h) != nil {
		return "", false
	}
	alg, ok := h.Alg.(string)
	return alg, ok
}

// VerifyFire verifies token for the fire req whose exact body is body: a
// direct token under the job's key, any other by the NAS verifier (or
// refused when the job is delivered directly). It answers as
// JWTVerifier.VerifyFire does.
func (v *DirectVerifier) VerifyFire(ctx context.Context, token string, body []byte, req contract.FireRequest) error {
	if token == "" {
		return reject("no token")
	}
	if !v.isDirect(token) {
		if v.keys.Direct(req.JobID) {
			v.check.cfg.Logger.Warn("fireauth: fire token rejected", "job_id", req.JobID, "reason", "a NAS token for a job delivered directly")
			return reject("the job is delivered directly: only a token signed with its cron key (HS256) is accepted")
		}
		err := v.nas.VerifyFire(ctx, token, body, req)
		if err == nil {
			if hdr, _, ok := strings.Cut(token, "."); ok {
				if _, known := v.nasHeaders.get(hdr); !known {
					v.nasHeaders.put(hdr, tokenHeader{})
				}
			}
		}
		return err
	}
	return v.verifyDirect(ctx, token, body, req)
}

// verifyDirect verifies a token whose header says HS256: on the lean path
// when it takes the token, else through golang-jwt, whose verdict stands.
func (v *DirectVerifier) verifyDirect(ctx context.Context, token string, body []byte, req contract.FireRequest) error {
	log := v.check.cfg.Logger
	refuse := func(reason string, args ...any) error {
		log.Warn("fireauth: direct fire token rejected", append([]any{"job_id", req.JobID, "reason", reason}, args...)...)
		return reject(reason)
	}
	if claims, kid, through, ok := v.lean(ctx, token, req); ok {
		return v.accept(claims, kid, through, body, req, refuse)
	}
	unverified := &contract.FireClaims{}
	t, _, err := jwt.NewParser().ParseUnverified(token, unverified)
	if err != nil {
		return refuse(parseReason(err))
	}
	if t.Method.Alg() != contract.DirectTokenAlg {
		return refuse("signature or algorithm not accepted")
	}
	kid, _ := t.Header["kid"].(string)
	switch {
	case kid == "":
		return refuse(parseReason(errNoKID))
	case !strings.HasPrefix(kid, contract.CronKeyIDPrefix):
		return refuse("kid is not a cron key")
	}
	if typ, _ := t.Header["typ"].(string); typ != contract.TokenTypeCronFire {
		return refuse(parseReason(errBadTyp))
	}
	if unverified.JobID == "" || unverified.JobID != req.JobID {
		return refuse("job_id does not match the body")
	}
	secret, through, ok := v.keys.CronKey(ctx, req.JobID, kid)
	if !ok {
		return refuse("kid is not a cron key of this job", "kid", kid)
	}
	claims := &contract.FireClaims{}
	_, err = v.parser.ParseWithClaims(token, claims, func(*jwt.Token) (any, error) { return secret, nil })
	if err != nil {
		if e := v.check.tooEarly(claims, err, body, req); e != nil {
			return e
		}
		return refuse(parseReason(err), "kid", kid)
	}
	return v.accept(claims, kid, through, body, req, refuse)
}

// accept ends the verification of a direct token whose signature and
// registered claims verified: the fire's own claims against the body, and
// a retired key's last slot.
func (v *DirectVerifier) accept(claims *contract.FireClaims, kid string, through time.Time, body []byte, req contract.FireRequest,
	refuse func(reason string, args ...any) error) error {
	if reason := v.check.checkClaims(claims, body, req); reason != "" {
		return refuse(reason, "kid", kid)
	}
	if !through.IsZero() {
		// checkClaims found fire_at equal to the body's.
		if req.FireAt.After(through) {
			return refuse("the cron key is retired: it verifies no slot after the last one armed under it", "kid", kid)
		}
	}
	v.check.observeIssued(claims)
	return nil
}

// lean verifies a direct token in the common case without golang-jwt's
// generic parsing: the header (cached per key once a token verified), the
// claims by the plain decoder, the key of the job the body names, the
// HMAC over the signing input, and the registered claims by the same
// validator golang-jwt's parser applies. It takes the token (ok) only when
// every step passes; for any other token the slow path decides, so a
// refusal is always golang-jwt's.
func (v *DirectVerifier) lean(ctx context.Context, token string, req contract.FireRequest) (claims *contract.FireClaims, kid string, through time.Time, ok bool) {
	hdrSeg, rest, found := strings.Cut(token, ".")
	if !found {
		return nil, "", time.Time{}, false
	}
	claimSeg, sigSeg, found := strings.Cut(rest, ".")
	if !found || strings.Contains(sigSeg, ".") {
		return nil, "", time.Time{}, false
	}
	h, cached := v.directHeaders.get(hdrSeg)
	if !cached {
		if h, ok = decodeHeader(hdrSeg); !ok {
			return nil, "", time.Time{}, false
		}
	}
	if h.alg != contract.DirectTokenAlg || h.typ != contract.TokenTypeCronFire || !strings.HasPrefix(h.kid, contract.CronKeyIDPrefix) {
		return nil, "", time.Time{}, false
	}
	claims = &contract.FireClaims{}
	if !decodeClaims(claimSeg, claims) || claims.JobID == "" || claims.JobID != req.JobID {
		return nil, "", time.Time{}, false
	}
	secret, through, found := v.keys.CronKey(ctx, req.JobID, h.kid)
	if !found {
		return nil, "", time.Time{}, false
	}
	sig, err := base64.RawURLEncoding.DecodeString(sigSeg)
	if err != nil {
		return nil, "", time.Time{}, false
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(token[:len(hdrSeg)+1+len(claimSeg)]))
	if !hmac.Equal(mac.Sum(nil), sig) || v.check.validator.Validate(claims) != nil {
		return nil, "", time.Time{}, false
	}
	if !cached {
		v.directHeaders.put(hdrSeg, h)
	}
	return claims, h.kid, through, true
}

// String names the verifier without its keys.
func (v *DirectVerifier) String() string { return fmt.Sprintf("fireauth.DirectVerifier(%T)", v.nas) }

// Health reports the NAS verifier's key set (its load, age and fetches),
// when it keeps one: the agent's key-set metrics and status read it
// through this verifier. A direct token needs no key set.
func (v *DirectVerifier) Health(ctx context.Context) Health {
	if h, ok := v.nas.(interface{ Health(context.Context) Health }); ok {
		return h.Health(ctx)
	}
	return Health{}
}
