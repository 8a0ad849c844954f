package contract

import (
	"encoding/json"
	"unicode/utf8"
)

// AppendJSONString appends s quoted exactly as encoding/json quotes it:
// printable ASCII without the characters json escapes (quote, backslash,
// <, > and &) is copied between quotes as is; anything else goes through
// json.Marshal, so the bytes are always json's. The hand-built bodies and
// tokens of the fire path use it.
func AppendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			v, _ := json.Marshal(s) // a string always marshals
			return append(b, v...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
