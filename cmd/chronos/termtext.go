package main

import (
	"fmt"
	"reflect"
	"strings"
	"unicode"
	"unicode/utf8"
)

// termSafe returns s fit to print on a terminal: everything a terminal could
// act on is written as a visible escape instead: C0 and C1 control
// characters (ESC, BEL, BS, CR, CSI, …) and DEL as \xNN or \uNNNN, tab and
// newline as \t and \n, Unicode format and separator characters (bidi
// overrides, zero-width characters, U+2028) as \uNNNN, and bytes that are not
// UTF-8 as \xNN. Printable text, spaces and non-ASCII letters included, is
// unchanged. The human output of the CLI passes every piece of user or remote
// text through it (job ids, names, commands, schedules, reasons, errors,
// paths); JSON output needs no help, its encoder escapes control characters.
func termSafe(s string) string { return escapeTerm(s, false) }

// termSafeLines is termSafe for multi-line messages: newlines stay.
func termSafeLines(s string) string { return escapeTerm(s, true) }

func escapeTerm(s string, keepNewlines bool) string {
	clean := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n' && keepNewlines:
			b.WriteByte('\n')
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x80 && (r < 0x20 || r == 0x7f):
			fmt.Fprintf(&b, `\x%02x`, r)
		case r < 0x80 || unicode.IsGraphic(r):
			b.WriteString(s[i : i+size])
		case r <= 0xffff:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
		i += size
	}
	return b.String()
}

// termSafeArgs returns args with every string (of any string type) and
// error passed through termSafe, for Printf-style helpers whose format is
// ours and whose arguments are not.
func termSafeArgs(args []any) []any {
	out := make([]any, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case error:
			out[i] = termSafe(v.Error())
		default:
			if rv := reflect.ValueOf(a); rv.Kind() == reflect.String {
				out[i] = termSafe(rv.String())
			} else {
				out[i] = a
			}
		}
	}
	return out
}

// cutText shortens s to at most n bytes, ending with "..." when it was cut,
// without splitting a UTF-8 sequence.
func cutText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	end := n - 3
	for end > 0 && !utf8.RuneStart(s[end]) {
		end--
	}
	return s[:end] + "..."
}
