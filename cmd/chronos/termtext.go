package main

import "github.com/chronoscron/chronos/internal/termtext"

// termSafe returns s fit to print on a terminal, on one line (see
// termtext.Escape): every piece of user or remote text in human output
// passes through it.
func termSafe(s string) string { return termtext.Escape(s, termtext.EscapeNewlines) }

// termSafeLines is termSafe for multi-line messages: newlines stay.
func termSafeLines(s string) string { return termtext.Escape(s, termtext.KeepNewlines) }

// termSafeArgs passes every string and error of args through termSafe.
func termSafeArgs(args []any) []any { return termtext.Args(args) }

// cutText shortens s to at most n bytes without splitting a character.
func cutText(s string, n int) string { return termtext.Cut(s, n) }
