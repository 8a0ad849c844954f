// Package localapi is the agent's local API and dashboard, served on a
// listener of its own (ui_listen, 127.0.0.1:8788 by default), never on the
// public fire listener.
//
// The API lists, shows, creates, edits, pauses, resumes, removes and runs
// jobs, lists and shows runs (with their output) and cancels live ones,
// reports the agent's status, and streams every ledger line and job change
// as Server-Sent Events (GET /api/events) with ids a client resumes from
// with Last-Event-ID. The dashboard at / is plain HTML, CSS and JavaScript
// embedded in the binary.
//
// A request whose Host is not a name of the listener (its address,
// localhost, a loopback address, or one of Options.Hosts) is refused with
// 421 before anything else, so a page that rebinds a name of its own to the
// agent's address reaches nothing.
//
// Every read and every change needs the agent's admin token: as
// "Authorization: Bearer <token>" (scripts, and Client, which the CLI uses
// to act through a running agent), or through POST /api/login, which sets a
// SameSite=Strict, HttpOnly session cookie for the browser. A call
// authenticated by the cookie must come from the page's own origin (no
// foreign Origin or cross-site Sec-Fetch-Site); a change must also carry
// the X-Chronos-UI header, which a cross-site form cannot send. A job's env
// values are answered as RedactedValue unless the caller asks with
// reveal=env.
package localapi
