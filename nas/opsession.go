package nas

// Browser sessions of the operator: a browser cannot send a Bearer header on
// its own, so the dashboard's login trades the operator token for a cookie
// value. The value is an expiry and an HMAC of it keyed by the operator
// token: every NAS process sharing the token accepts it, it reveals nothing
// of the token, and changing the token ends every session.

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/chronoscron/chronos/contract"
)

// OperatorSessionTTL is how long an operator's browser session lasts.
const OperatorSessionTTL = 12 * time.Hour

// operatorSessionVersion starts every session value.
const operatorSessionVersion = "v1"

// OperatorLogin checks an operator token typed into the login form and
// returns the value of a session that expires at the returned time. Errors
// are *contract.Error: 404 when the operator routes are disabled, 401 for a
// wrong or empty token.
func (s *Service) OperatorLogin(token string) (string, time.Time, error) {
	if !s.HasOperator() {
		return "", time.Time{}, contract.Errorf(http.StatusNotFound, contract.CodeNotFound, "no such route")
	}
	if token == "" || subtle.ConstantTimeCompare([]byte(token), s.operator) != 1 {
		s.log.Warn("operator login refused: wrong token")
		return "", time.Time{}, contract.Errorf(http.StatusUnauthorized, contract.CodeUnauthenticated, "wrong operator token")
	}
	exp := s.now().Add(OperatorSessionTTL).Truncate(time.Second)
	stamp := strconv.FormatInt(exp.Unix(), 10)
	return operatorSessionVersion + "." + stamp + "." + s.sessionMAC(stamp), exp, nil
}

// AuthorizeOperatorSession checks a session value OperatorLogin returned:
// 404 when the operator routes are disabled, 401 for a value that is
// malformed, forged (or from another operator token) or expired.
func (s *Service) AuthorizeOperatorSession(value string) error {
	if !s.HasOperator() {
		return contract.Errorf(http.StatusNotFound, contract.CodeNotFound, "no such route")
	}
	refused := contract.Errorf(http.StatusUnauthorized, contract.CodeUnauthenticated, "the operator session is not valid or has expired; log in again")
	parts := strings.Split(value, ".")
	if len(parts) != 3 || parts[0] != operatorSessionVersion {
		return refused
	}
	exp, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil || !hmac.Equal([]byte(parts[2]), []byte(s.sessionMAC(parts[1]))) {
		return refused
	}
	if !s.now().Before(time.Unix(exp, 0)) {
		return refused
	}
	return nil
}

// sessionMAC is the HMAC-SHA256 of a session's expiry stamp, keyed by the
// operator token.
func (s *Service) sessionMAC(stamp string) string {
	m := hmac.New(sha256.New, s.operator)
	m.Write([]byte("chronos operator session\x00" + stamp))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}
