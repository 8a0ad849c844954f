package nas

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"strings"
)

// cursorSigner binds engine list cursors to the agent they were issued to,
// so a cursor only ever pages its caller's own rows. Keys are derived from
// the relay secrets (the first signs, all verify), so every NAS process that
// shares the secrets accepts the cursors of the others.
type cursorSigner struct {
	keys [][]byte
}

const cursorPrefix = "c1."

func newCursorSigner(secrets [][]byte) cursorSigner {
	keys := make([][]byte, 0, len(secrets))
	for _, s := range secrets {
		m := hmac.New(sha256.New, s)
		m.Write([]byte("chronos list cursor v1"))
		keys = append(keys, m.Sum(nil))
	}
	return cursorSigner{keys: keys}
}

func (c cursorSigner) mac(key []byte, agentID, engineCursor string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(agentID))
	m.Write([]byte{0})
	m.Write([]byte(engineCursor))
	return m.Sum(nil)[:16]
}

// Sign wraps an engine cursor for agentID.
func (c cursorSigner) Sign(agentID, engineCursor string) string {
	return cursorPrefix + base64.RawURLEncoding.EncodeToString([]byte(engineCursor)) + "." +
		base64.RawURLEncoding.EncodeToString(c.mac(c.keys[0], agentID, engineCursor))
}

// Open returns the engine cursor inside a cursor issued to agentID.
func (c cursorSigner) Open(agentID, cursor string) (string, bool) {
	rest, ok := strings.CutPrefix(cursor, cursorPrefix)
	if !ok || len(cursor) > 2048 {
		return "", false
	}
	encCur, encMAC, ok := strings.Cut(rest, ".")
	if !ok {
		return "", false
	}
	cur, err1 := base64.RawURLEncoding.DecodeString(encCur)
	got, err2 := base64.RawURLEncoding.DecodeString(encMAC)
	if err1 != nil || err2 != nil || len(cur) == 0 {
		return "", false
	}
	for _, k := range c.keys {
		if hmac.Equal(got, c.mac(k, agentID, string(cur))) {
			return string(cur), true
		}
	}
	return "", false
}
