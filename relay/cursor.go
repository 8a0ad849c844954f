package relay

import (
	"encoding/base64"
	"strings"
)

// Cursor kinds: a cursor issued for one listing is refused by the other.
const (
	CursorArmed = "a" // List: an agent's armed one-shots
	CursorDead  = "d" // ListDead: the dead letter
)

// EncodeCursor writes an opaque list cursor for engines: the listing kind, its
// scope (an agent id, or "" for every agent) and the position after which the
// next page starts.
func EncodeCursor(kind, scope, pos string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(kind + "\x00" + scope + "\x00" + pos))
}

// DecodeCursor returns the position of a cursor EncodeCursor issued for the
// same kind and scope; "" is the start. Anything else is ErrInvalidCursor.
func DecodeCursor(kind, scope, cursor string) (string, error) {
	if cursor == "" {
		return "", nil
	}
	b, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil {
		return "", ErrInvalidCursor
	}
	parts := strings.SplitN(string(b), "\x00", 3)
	if len(parts) != 3 || parts[0] != kind || parts[1] != scope || parts[2] == "" {
		return "", ErrInvalidCursor
	}
	return parts[2], nil
}
