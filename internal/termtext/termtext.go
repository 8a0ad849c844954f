// Package termtext makes text from users and remote peers safe to print on
// a terminal, and shortens it without splitting a character.
package termtext

import (
	"fmt"
	"reflect"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Newlines says what Escape does with a newline.
type Newlines int

// Newline handling.
const (
	// EscapeNewlines writes a newline as \n: the text stays on one line.
	EscapeNewlines Newlines = iota
	// KeepNewlines keeps newlines, for multi-line messages.
	KeepNewlines
)

// Escape returns s fit to print on a terminal: everything a terminal could
// act on is written as a visible escape instead: C0 and C1 control
// characters (ESC, BEL, BS, CR, CSI, …) and DEL as \xNN or \uNNNN, tab as
// \t, newline as \n (unless nl keeps it), Unicode format and separator
// characters (bidi overrides, zero-width characters, U+2028) as \uNNNN, and
// bytes that are not UTF-8 as \xNN. Printable text, spaces and non-ASCII
// letters included, is unchanged. Human output passes every piece of user or
// remote text through it (job ids, names, commands, schedules, reasons,
// errors, paths); JSON needs no help, its encoder escapes control characters.
func Escape(s string, nl Newlines) string {
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
		case r == '\n' && nl == KeepNewlines:
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

// Args returns args with every string (of any string type) and
// error passed through Escape, for Printf-style helpers whose format is
// ours and whose arguments are not.
func Args(args []any) []any {
	out := make([]any, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case error:
			out[i] = Escape(v.Error(), EscapeNewlines)
		default:
			if rv := reflect.ValueOf(a); rv.Kind() == reflect.String {
				out[i] = Escape(rv.String(), EscapeNewlines)
			} else {
				out[i] = a
			}
		}
	}
	return out
}

// Cut shortens s to at most n bytes, ending with "..." when it was cut,
// without splitting a UTF-8 sequence.
func Cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	end := n - 3
	for end > 0 && !utf8.RuneStart(s[end]) {
		end--
	}
	return s[:end] + "..."
}
