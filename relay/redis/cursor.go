package redis

import (
	"encoding/base64"
	"strings"

	"github.com/chronoscron/chronos/relay"
)

// Cursor kinds: a cursor of one listing is refused by the other.
const (
	cursorArmed = "a"
	cursorDead  = "d"
)

// encodeCursor writes an opaque cursor bound to a listing kind and scope
// (agent id, or "" for all agents) holding the position after which the next
// page starts.
func encodeCursor(kind, scope, pos string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(kind + "\x00" + scope + "\x00" + pos))
}

// decodeCursor returns the position of a cursor that encodeCursor issued for
// the same kind and scope; "" is the start. Anything else is
// relay.ErrInvalidCursor.
func decodeCursor(kind, scope, cursor string) (string, error) {
	if cursor == "" {
		return "", nil
	}
	b, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil {
		return "", relay.ErrInvalidCursor
	}
	parts := strings.SplitN(string(b), "\x00", 3)
	if len(parts) != 3 || parts[0] != kind || parts[1] != scope || parts[2] == "" {
		return "", relay.ErrInvalidCursor
	}
	return parts[2], nil
}
