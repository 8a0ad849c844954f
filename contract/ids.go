package contract

import (
	"regexp"
	"strings"
	"time"
)

// jobID is JobIDPattern compiled once for every side of the wire.
var jobID = regexp.MustCompile(JobIDPattern)

// ValidJobID reports whether id is a job id as the wire contract spells
// them (JobIDPattern): 1–128 of A–Z, a–z, 0–9, '.', '_' and '-'.
func ValidJobID(id string) bool { return jobID.MatchString(id) }

// maxBearer bounds the token of an Authorization header: no token Chronos
// issues or accepts comes near it, and a bound keeps a hostile header from
// being parsed as a JWT.
const maxBearer = 8192

// BearerToken returns the token of an Authorization header value of the
// form "Bearer <token>" (the scheme in any case, RFC 9110 §11.1). It reports
// false for another scheme, an empty token, a token with white space inside
// or one longer than 8 KiB.
func BearerToken(header string) (string, bool) {
	scheme, tok, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, strings.TrimSpace(BearerPrefix)) {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	if tok == "" || len(tok) > maxBearer || strings.ContainsAny(tok, " \t\r\n") {
		return "", false
	}
	return tok, true
}

// DaysIn returns the number of days of month (1–12) in the proleptic
// Gregorian year.
func DaysIn(year int, month time.Month) int {
	switch month {
	case time.February:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case time.April, time.June, time.September, time.November:
		return 30
	}
	return 31
}
