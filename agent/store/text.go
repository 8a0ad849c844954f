package store

import (
	"bytes"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// checkText refuses a jobs file whose text encoding/json would change while
// decoding it: bytes that are not UTF-8, and \u escapes of lone UTF-16
// surrogates. The decoder reads either as U+FFFD without an error, so a
// command could differ between the file and the run, and the next write would
// store the changed text for good.
func checkText(raw []byte) error {
	if !utf8.Valid(raw) {
		off := firstInvalidUTF8(raw)
		return fmt.Errorf("invalid UTF-8 at byte %d (line %d)", off, 1+bytes.Count(raw[:off], []byte("\n")))
	}
	if off, ok := loneSurrogate(raw); ok {
		return fmt.Errorf("escape %s of a lone UTF-16 surrogate at byte %d (line %d)", raw[off:off+6], off, 1+bytes.Count(raw[:off], []byte("\n")))
	}
	return nil
}

// firstInvalidUTF8 returns the offset of the first byte of raw that does not
// start a valid UTF-8 sequence (len(raw) if there is none).
func firstInvalidUTF8(raw []byte) int {
	for i := 0; i < len(raw); {
		r, size := utf8.DecodeRune(raw[i:])
		if r == utf8.RuneError && size == 1 {
			return i
		}
		i += size
	}
	return len(raw)
}

// loneSurrogate finds, inside the JSON strings of raw, a \u escape of a high
// surrogate not followed by an escaped low surrogate, or of a low surrogate on
// its own, and returns its offset. Malformed escapes are left to the decoder.
func loneSurrogate(raw []byte) (int, bool) {
	inString := false
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; {
		case !inString:
			inString = c == '"'
		case c == '"':
			inString = false
		case c == '\\':
			r, ok := escapedRune(raw, i)
			switch {
			case !ok: // another escape: skip the escaped byte
				i++
			case r >= 0xD800 && r <= 0xDBFF:
				if low, ok := escapedRune(raw, i+6); !ok || low < 0xDC00 || low > 0xDFFF {
					return i, true
				}
				i += 11
			case r >= 0xDC00 && r <= 0xDFFF:
				return i, true
			default:
				i += 5
			}
		}
	}
	return 0, false
}

// escapedRune reads the \uXXXX escape at raw[i:].
func escapedRune(raw []byte, i int) (rune, bool) {
	if i+6 > len(raw) || raw[i] != '\\' || raw[i+1] != 'u' {
		return 0, false
	}
	v, err := strconv.ParseUint(string(raw[i+2:i+6]), 16, 32)
	if err != nil {
		return 0, false
	}
	return rune(v), true
}
