package localapi

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/chronoscron/chronos/contract"
)

// access authenticates the local API's requests: the admin token, and the
// sessions of the dashboard (login, logout, the session cookie). It is safe
// for concurrent use.
type access struct {
	token  string // the admin token, trimmed
	mu     sync.Mutex
	sessns map[string]time.Time // session id -> expiry
}

// newAccess returns the access of the admin token token.
func newAccess(token string) *access {
	return &access{token: strings.TrimSpace(token), sessns: map[string]time.Time{}}
}

// how a request is authenticated.
type credential int

const (
	credNone credential = iota
	credBearer
	credCookie
	credBadBearer
)

// credentialOf says how r is authenticated.
func (a *access) credentialOf(r *http.Request) credential {
	if h := r.Header.Get("Authorization"); h != "" {
		tok, ok := contract.BearerToken(h)
		if ok && a.tokenOK(tok) {
			return credBearer
		}
		return credBadBearer
	}
	if ck, err := r.Cookie(SessionCookie); err == nil && a.sessionOK(ck.Value) {
		return credCookie
	}
	return credNone
}

func (a *access) tokenOK(tok string) bool {
	return subtle.ConstantTimeCompare([]byte(tok), []byte(a.token)) == 1
}

func (a *access) sessionOK(id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	exp, ok := a.sessns[id]
	if ok && time.Now().After(exp) {
		delete(a.sessns, id)
		return false
	}
	return ok
}

func unauthenticated(why string) *contract.Error {
	return contract.Errorf(http.StatusUnauthorized, contract.CodeUnauthenticated, "%s", why)
}

// readAuth needs the token, or a session of the dashboard used from its
// own origin, for every read: jobs carry their environment, runs their
// output.
func (a *access) readAuth(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		switch a.credentialOf(c.Request()) {
		case credBearer:
			return next(c)
		case credCookie:
			if err := sameSiteRead(c.Request()); err != nil {
				return err
			}
			return next(c)
		case credBadBearer:
			return contract.Errorf(http.StatusUnauthorized, contract.CodeInvalidToken, "the bearer token is not the agent's admin token")
		}
		return unauthenticated("reads need the agent's admin token: Authorization: Bearer <token>, or log in")
	}
}

// sameSiteRead refuses a read made with the session cookie by another
// origin: a foreign Origin, or a Sec-Fetch-Site other than same-origin or
// none (another port of the same host is the same site to the cookie, not
// the same origin).
func sameSiteRead(r *http.Request) *contract.Error {
	if err := sameOriginLogin(r); err != nil {
		return err
	}
	if sf := r.Header.Get("Sec-Fetch-Site"); sf != "" && sf != "same-origin" && sf != "none" {
		return contract.Errorf(http.StatusForbidden, contract.CodeForbidden, "cross-site request refused")
	}
	return nil
}

// writeAuth needs the token for every change; a change authenticated by the
// session cookie must come from the dashboard itself.
func (a *access) writeAuth(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		switch a.credentialOf(c.Request()) {
		case credBearer:
			return next(c)
		case credCookie:
			if err := sameOrigin(c.Request()); err != nil {
				return err
			}
			return next(c)
		case credBadBearer:
			return contract.Errorf(http.StatusUnauthorized, contract.CodeInvalidToken, "the bearer token is not the agent's admin token")
		}
		return unauthenticated("changes need the agent's admin token: Authorization: Bearer <token>, or log in")
	}
}

// sameOrigin refuses a request another site made: a foreign Origin, a
// cross-site Sec-Fetch-Site, or no X-Chronos-UI header.
func sameOrigin(r *http.Request) *contract.Error {
	if err := sameSiteRead(r); err != nil {
		return err
	}
	if r.Header.Get(HeaderUI) == "" {
		return contract.Errorf(http.StatusForbidden, contract.CodeForbidden, "a change made with the session cookie needs the %s header", HeaderUI)
	}
	return nil
}

// LoginRequest is the body of POST /api/login.
type LoginRequest struct {
	Token string `json:"token"`
}

// SessionInfo answers GET /api/session, POST /api/login and POST
// /api/logout: whether the caller is authenticated. ReadsOpen is always
// false (every read needs the token or a session); it is kept for clients
// that read it.
type SessionInfo struct {
	Authenticated bool `json:"authenticated"`
	ReadsOpen     bool `json:"reads_open"`
}

func (a *access) session(c echo.Context) error {
	cred := a.credentialOf(c.Request())
	return writeJSON(c, http.StatusOK, SessionInfo{Authenticated: cred == credBearer || cred == credCookie})
}

func (a *access) login(c echo.Context) error {
	if err := sameOriginLogin(c.Request()); err != nil {
		return err
	}
	var req LoginRequest
	if err := decode(c, &req); err != nil {
		return err
	}
	if !a.tokenOK(strings.TrimSpace(req.Token)) {
		return contract.Errorf(http.StatusUnauthorized, contract.CodeInvalidToken, "that is not the agent's admin token")
	}
	var b [32]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	now := time.Now()
	a.mu.Lock()
	for old, exp := range a.sessns {
		if now.After(exp) {
			delete(a.sessns, old)
		}
	}
	a.sessns[id] = now.Add(sessionTTL)
	a.mu.Unlock()
	http.SetCookie(c.Response(), &http.Cookie{Name: SessionCookie, Value: id, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, MaxAge: int(sessionTTL / time.Second), Secure: c.Request().TLS != nil})
	return writeJSON(c, http.StatusOK, SessionInfo{Authenticated: true})
}

// sameOriginLogin refuses a login posted from another site.
func sameOriginLogin(r *http.Request) *contract.Error {
	if o := r.Header.Get("Origin"); o != "" && o != "http://"+r.Host && o != "https://"+r.Host {
		return contract.Errorf(http.StatusForbidden, contract.CodeForbidden, "cross-origin request refused")
	}
	return nil
}

func (a *access) logout(c echo.Context) error {
	if ck, err := c.Request().Cookie(SessionCookie); err == nil {
		a.mu.Lock()
		delete(a.sessns, ck.Value)
		a.mu.Unlock()
	}
	http.SetCookie(c.Response(), &http.Cookie{Name: SessionCookie, Value: "", Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, MaxAge: -1})
	return writeJSON(c, http.StatusOK, SessionInfo{})
}
