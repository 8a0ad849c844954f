package nas

// Browser sessions of the operator: a browser cannot send a Bearer header on
// its own, so the dashboard's login trades the operator token for a cookie
// value. The value is a random session id, an expiry and an HMAC of both
// keyed by the operator token: every NAS process sharing the token accepts
// it, it reveals nothing of the token, and changing the token ends every
// session. A logout lists the session's id as revoked until its expiry (see
// sessionrevoke.go), which every NAS process sharing the store reads. The
// login is throttled per client address (see loginthrottle.go).

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/chronoscron/chronos/contract"
)

// OperatorAuth authorizes the operator: the operator token of scripts and
// the browser sessions of the dashboard. It is safe for concurrent use.
type OperatorAuth struct {
	*core
	revoked sessionRevocations // sessions ended by a logout
	logins  *loginThrottle     // the login's failures per address
}

// OperatorSessionTTL is how long an operator's browser session lasts.
const OperatorSessionTTL = 12 * time.Hour

// operatorSessionVersion starts every session value. Values of the first
// version carried no id, so a logout could not end them; they are refused.
const operatorSessionVersion = "v2"

// Login checks an operator token typed into the login form, sent
// from the client address remoteAddr (the TCP peer, host:port), and returns
// the value of a session that expires at the returned time. Errors are
// *contract.Error: 404 when the operator routes are disabled, 401 for a
// wrong or empty token, 429 rate_limited with RetryAfter while remoteAddr
// (or every address together) has sent too many wrong tokens: the token is
// then not even compared, so the right one is refused too.
func (s *OperatorAuth) Login(remoteAddr, token string) (string, time.Time, error) {
	if !s.hasOperator() {
		return "", time.Time{}, contract.Errorf(http.StatusNotFound, contract.CodeNotFound, "no such route")
	}
	right := token != "" && subtle.ConstantTimeCompare([]byte(token), s.operatorToken) == 1
	now := s.now()
	v := s.logins.attempt(loginClient(remoteAddr), now, right)
	switch {
	case v.Refused:
		e := contract.Errorf(http.StatusTooManyRequests, contract.CodeRateLimited,
			"too many wrong operator tokens; retry in %ds", int64((v.RetryAfter+time.Second-1)/time.Second))
		e.RetryAfter = v.RetryAfter
		return "", time.Time{}, e
	case !right:
		return "", time.Time{}, contract.Errorf(http.StatusUnauthorized, contract.CodeUnauthenticated, "wrong operator token")
	}
	var raw [16]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", time.Time{}, fmt.Errorf("operator session id: %w", err)
	}
	id := base64.RawURLEncoding.EncodeToString(raw[:])
	exp := now.Add(OperatorSessionTTL).Truncate(time.Second)
	stamp := strconv.FormatInt(exp.Unix(), 10)
	return operatorSessionVersion + "." + id + "." + stamp + "." + s.sessionMAC(id, stamp), exp, nil
}

// AuthorizeSession checks a session value Login returned:
// 404 when the operator routes are disabled, 401 for a value that is
// malformed, forged (or from another operator token), expired or logged
// out. An error reading the revocation list wraps relay.ErrUnavailable.
func (s *OperatorAuth) AuthorizeSession(ctx context.Context, value string) error {
	if !s.hasOperator() {
		return contract.Errorf(http.StatusNotFound, contract.CodeNotFound, "no such route")
	}
	refused := contract.Errorf(http.StatusUnauthorized, contract.CodeUnauthenticated, "the operator session is not valid or has expired; log in again")
	id, _, ok := s.parseSession(value)
	if !ok {
		return refused
	}
	revoked, err := s.revoked.Revoked(ctx, id)
	if err != nil {
		return err
	}
	if revoked {
		return refused
	}
	return nil
}

// Logout ends the session of value on every NAS process sharing the
// store: its id is listed as revoked until it would have expired. A value
// that is not a live session (absent, malformed, forged, expired) changes
// nothing and is no error. Errors: 404 when the operator routes are
// disabled; an error writing the revocation list wraps relay.ErrUnavailable.
func (s *OperatorAuth) Logout(ctx context.Context, value string) error {
	if !s.hasOperator() {
		return contract.Errorf(http.StatusNotFound, contract.CodeNotFound, "no such route")
	}
	id, exp, ok := s.parseSession(value)
	if !ok {
		return nil
	}
	if err := s.revoked.Revoke(ctx, id, exp.Sub(s.now())); err != nil {
		return err
	}
	s.log.InfoContext(ctx, "operator logged out", "session_expires_at", exp.UTC().Format(time.RFC3339))
	return nil
}

// parseSession returns the id and expiry of a session value whose HMAC is
// right and that has not expired.
func (s *OperatorAuth) parseSession(value string) (id string, exp time.Time, ok bool) {
	parts := strings.Split(value, ".")
	if len(parts) != 4 || parts[0] != operatorSessionVersion || parts[1] == "" {
		return "", time.Time{}, false
	}
	unix, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil || !hmac.Equal([]byte(parts[3]), []byte(s.sessionMAC(parts[1], parts[2]))) {
		return "", time.Time{}, false
	}
	exp = time.Unix(unix, 0)
	if !s.now().Before(exp) {
		return "", time.Time{}, false
	}
	return parts[1], exp, true
}

// sessionMAC is the HMAC-SHA256 of a session's id and expiry stamp, keyed
// by the operator token.
func (s *OperatorAuth) sessionMAC(id, stamp string) string {
	m := hmac.New(sha256.New, s.operatorToken)
	m.Write([]byte("chronos operator session " + operatorSessionVersion + "\x00" + id + "\x00" + stamp))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// AuthorizeToken checks an operator bearer token in constant time: 401
// unauthenticated without one, 403 forbidden for a wrong one, 404 when the
// operator routes are disabled.
func (s *OperatorAuth) AuthorizeToken(authorization string) error {
	if !s.hasOperator() {
		return contract.Errorf(http.StatusNotFound, contract.CodeNotFound, "no such route")
	}
	tok, ok := contract.BearerToken(authorization)
	if !ok {
		return contract.Errorf(http.StatusUnauthorized, contract.CodeUnauthenticated, "missing or malformed Authorization: Bearer header")
	}
	if subtle.ConstantTimeCompare([]byte(tok), s.operatorToken) != 1 {
		return contract.Errorf(http.StatusForbidden, contract.CodeForbidden, "wrong operator token")
	}
	return nil
}
