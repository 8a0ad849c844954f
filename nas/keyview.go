package nas

import (
	"io"

	"github.com/chronoscron/chronos/internal/termtext"
)

// KeyInfo is a key of a signing keys dir as the command line shows it.
type KeyInfo struct {
	KID string `json:"kid"`
	Alg string `json:"alg"`
	// State is "signing" for the key that signs, else "published".
	State string `json:"state"`
}

// Keys lists the set's published keys, saying which one signs.
func (s *KeySet) Keys() []KeyInfo {
	out := make([]KeyInfo, 0, len(s.Published))
	for _, k := range s.Published {
		state := "published"
		if s.Active != nil && k.KID == s.Active.KID {
			state = "signing"
		}
		out = append(out, KeyInfo{KID: k.KID, Alg: k.Alg, State: state})
	}
	return out
}

// WriteKeyTable writes keys as a table: kid, algorithm and state.
func WriteKeyTable(w io.Writer, keys []KeyInfo) error {
	rows := make([][]string, 0, len(keys))
	for _, k := range keys {
		rows = append(rows, []string{k.KID, k.Alg, k.State})
	}
	return termtext.Table(w, []string{"KID", "ALG", "STATE"}, rows)
}
