package inputs

import (
	"fmt"
	"strings"
)

// queryStarts are the words a read-only query may start with: SELECT, a
// common table expression, VALUES, and PostgreSQL's TABLE name.
var queryStarts = map[string]bool{"SELECT": true, "WITH": true, "VALUES": true, "TABLE": true}

// writeWords are the words that make a statement more than a read wherever
// they stand outside literals, quoted names and comments: a data change in
// a common table expression (WITH d AS (DELETE ...)), a row lock (SELECT
// ... FOR UPDATE), or a statement of its own.
var writeWords = map[string]bool{
	"INSERT": true, "UPDATE": true, "DELETE": true, "MERGE": true, "UPSERT": true,
	"CREATE": true, "DROP": true, "ALTER": true, "TRUNCATE": true, "RENAME": true,
	"ATTACH": true, "DETACH": true, "PRAGMA": true, "VACUUM": true, "REINDEX": true,
	"GRANT": true, "REVOKE": true, "COPY": true, "CALL": true, "LOCK": true,
	"COMMIT": true, "ROLLBACK": true, "SAVEPOINT": true, "RELEASE": true, "INTO": true,
}

// checkReadQuery refuses, with an error that says why, anything but a
// single query: one statement that starts as a query does and has no word
// that writes, locks or ends a transaction outside its literals, quoted
// names and comments. It is the early, readable half of the guard (it runs
// at jobs add); the other half is the read-only connection Resolve opens,
// which holds whatever this lets through.
func checkReadQuery(q string) error {
	words, stmts, err := sqlWords(q)
	if err != nil {
		return err
	}
	if stmts > 1 {
		return fmt.Errorf("the query must be one statement, not %d", stmts)
	}
	if len(words) == 0 {
		return fmt.Errorf("the query has no statement")
	}
	if first := words[0]; !queryStarts[first] {
		return fmt.Errorf("the query starts with %s: an input may only read (SELECT, WITH, VALUES or TABLE)", first)
	}
	for _, w := range words[1:] {
		if writeWords[w] {
			return fmt.Errorf("the query has %s: an input may only read", w)
		}
	}
	return nil
}

// sqlWords reads q as SQL's lexer would, as far as telling words apart
// from literals goes: it returns the bare words (upper-cased) outside
// string literals ('...', E'...', $tag$...$tag$), quoted names ("...",
// `...`, [...]) and comments (-- and /* */, nested as PostgreSQL nests
// them), and how many statements the semicolons separate (an empty
// statement, such as after a trailing semicolon, does not count).
func sqlWords(q string) (words []string, stmts int, err error) {
	inStmt := false
	for i := 0; i < len(q); {
		c := q[i]
		switch {
		case c == ';':
			if inStmt {
				stmts++
				inStmt = false
			}
			i++
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			i++
		case c == '-' && i+1 < len(q) && q[i+1] == '-':
			for i < len(q) && q[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(q) && q[i+1] == '*':
			depth := 0
			for done := false; i < len(q) && !done; {
				switch {
				case strings.HasPrefix(q[i:], "/*"):
					depth++
					i += 2
				case strings.HasPrefix(q[i:], "*/"):
					depth--
					i += 2
				default:
					i++
				}
				done = depth == 0
			}
			if depth != 0 {
				return nil, 0, fmt.Errorf("the query has an unclosed comment")
			}
		case c == '\'':
			inStmt = true
			if i, err = skipQuoted(q, i, '\'', false); err != nil {
				return nil, 0, err
			}
		case (c == 'E' || c == 'e') && i+1 < len(q) && q[i+1] == '\'':
			inStmt = true
			if i, err = skipQuoted(q, i+1, '\'', true); err != nil {
				return nil, 0, err
			}
		case c == '"' || c == '`':
			inStmt = true
			if i, err = skipQuoted(q, i, c, false); err != nil {
				return nil, 0, err
			}
		case c == '[':
			inStmt = true
			end := strings.IndexByte(q[i+1:], ']')
			if end < 0 {
				return nil, 0, fmt.Errorf("the query has an unclosed [name]")
			}
			i += end + 2
		case c == '$' && dollarTag(q[i:]) != "":
			inStmt = true
			tag := dollarTag(q[i:])
			end := strings.Index(q[i+len(tag):], tag)
			if end < 0 {
				return nil, 0, fmt.Errorf("the query has an unclosed %s string", tag)
			}
			i += len(tag) + end + len(tag)
		case isWordStart(c):
			inStmt = true
			j := i
			for j < len(q) && isWordPart(q[j]) {
				j++
			}
			words = append(words, strings.ToUpper(q[i:j]))
			i = j
		default:
			inStmt = true
			i++
		}
	}
	if inStmt {
		stmts++
	}
	return words, stmts, nil
}

// skipQuoted returns the index just past the literal or quoted name that
// opens at q[i] with quote (a doubled quote stands for itself; with
// backslash, so does a quote after a backslash, as in E'...').
func skipQuoted(q string, i int, quote byte, backslash bool) (int, error) {
	for j := i + 1; j < len(q); j++ {
		switch {
		case backslash && q[j] == '\\':
			j++
		case q[j] == quote:
			if j+1 < len(q) && q[j+1] == quote {
				j++
				continue
			}
			return j + 1, nil
		}
	}
	return 0, fmt.Errorf("the query has an unclosed %c", quote)
}

// dollarTag returns the opening $tag$ (or $$) of a dollar-quoted string at
// the start of s, or "" when s does not start one (a $1 parameter does
// not).
func dollarTag(s string) string {
	for j := 1; j < len(s); j++ {
		switch c := s[j]; {
		case c == '$':
			return s[:j+1]
		case isWordPart(c) && !(j == 1 && c >= '0' && c <= '9'):
		default:
			return ""
		}
	}
	return ""
}

func isWordStart(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}

func isWordPart(c byte) bool { return isWordStart(c) || c >= '0' && c <= '9' || c == '$' }
