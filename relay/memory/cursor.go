package memory

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

// encodeCursor writes an opaque cursor: kind, the listing's scope (agent id,
// or "" for every agent) and the position after which the next page starts.
func encodeCursor(kind, scope, pos string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(kind + "\x00" + scope + "\x00" + pos))
}

// decodeCursor returns the position of a cursor issued by encodeCursor for
// the same kind and scope; "" decodes to "". Anything else is
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
