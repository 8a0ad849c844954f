package store

import (
	"bytes"
	"fmt"
	"reflect"
	"strconv"
	"strings"
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

// CheckText reports the first string of j (its id, name, schedule, payload:
// command, arguments, environment, URL, headers, body, and every other text
// field) that is not valid UTF-8. Such text cannot be stored: JSON would keep
// U+FFFD in its place, and the job would run something other than what was
// asked.
func (j *Job) CheckText() error {
	if path, ok := invalidText(reflect.ValueOf(j), "job"); ok {
		return fmt.Errorf("%s is not valid UTF-8 text", path)
	}
	return nil
}

// invalidText walks v and returns the path of the first string (or map key)
// that is not valid UTF-8.
func invalidText(v reflect.Value, path string) (string, bool) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return "", false
		}
		return invalidText(v.Elem(), path)
	case reflect.String:
		if !utf8.ValidString(v.String()) {
			return path, true
		}
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name := strings.Split(f.Tag.Get("json"), ",")[0]
			if name == "" || name == "-" {
				name = f.Name
			}
			if f.Anonymous {
				name = ""
			}
			sub := path
			if name != "" {
				sub += "." + name
			}
			if p, bad := invalidText(v.Field(i), sub); bad {
				return p, true
			}
		}
	case reflect.Slice, reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return "", false // raw bytes, not text
		}
		for i := range v.Len() {
			if p, bad := invalidText(v.Index(i), fmt.Sprintf("%s[%d]", path, i)); bad {
				return p, true
			}
		}
	case reflect.Map:
		iter := v.MapRange()
		for iter.Next() {
			k := iter.Key()
			if k.Kind() == reflect.String && !utf8.ValidString(k.String()) {
				return path + " (a key)", true
			}
			if p, bad := invalidText(iter.Value(), fmt.Sprintf("%s[%q]", path, k.String())); bad {
				return p, true
			}
		}
	}
	return "", false
}
