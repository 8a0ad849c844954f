package main

import "github.com/chronoscron/chronos/internal/termtext"

// termSafe returns s fit to print on a terminal, on one line (see
// termtext.Escape): every piece of user or remote text in human output
// passes through it.
func termSafe(s string) string { return termtext.Escape(s, termtext.EscapeNewlines) }
