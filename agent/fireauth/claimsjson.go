package fireauth

import (
	"encoding/json"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/chronoscron/chronos/contract"
)

// decodeFireClaims decodes the JSON claims of a fire token into c, with
// exactly the result json.Unmarshal gives: quickly for the plain form NAS
// writes, through json.Unmarshal for anything else. It reports whether the
// claims decoded (json.Unmarshal's error is what parseToken reports, so it
// is not kept here).
func decodeFireClaims(b []byte, c *contract.FireClaims) bool {
	if decodePlainFireClaims(string(b), c) {
		return true
	}
	*c = contract.FireClaims{}
	return json.Unmarshal(b, c) == nil
}

// Bits of the claims decodePlainFireClaims has seen, to refuse a repeat.
const (
	seenIss = 1 << iota
	seenAud
	seenPurpose
	seenIat
	seenNbf
	seenExp
	seenJti
	seenJobID
	seenFireAt
	seenScheduleID
	seenAttempt
	seenBodyHash
)

// Longest integers decodePlainFireClaims takes: a NumericDate's float64
// holds every 15-digit integer exactly, and attempt fits an int on every
// platform with 9.
const (
	maxDateDigits    = 15
	maxAttemptDigits = 9
)

// decodePlainFireClaims decodes s into c when s is one JSON object of the
// claims of contract.FireClaims, each named exactly (no other member, none
// twice), with strings free of escapes and bytes outside printable ASCII,
// and numbers that are plain non-negative integers. It reports false for
// anything else, leaving c partly written: json.Unmarshal then decides.
// Within that form json.Unmarshal gives the same claims: every string is
// taken as written, an integer date n is NumericDate's
// newNumericDateFromSeconds(float64(n)), which is jwt.NewNumericDate(time.Unix(n, 0)).
func decodePlainFireClaims(s string, c *contract.FireClaims) bool {
	d := plainJSON{s: s}
	if !d.open() {
		return false
	}
	var (
		seen  int
		dates [3]jwt.NumericDate // one allocation for iat, nbf and exp
	)
	for more := d.firstMember(); more; {
		key, ok := d.str()
		if !ok || !d.colon() {
			return false
		}
		bit, ok := d.member(key, c, &dates)
		if !ok || seen&bit != 0 {
			return false
		}
		seen |= bit
		if more, ok = d.next(); !ok {
			return false
		}
	}
	if !d.end() {
		return false
	}
	if seen&(seenIat|seenNbf|seenExp) != 0 {
		p := new([3]jwt.NumericDate)
		*p = dates
		if seen&seenIat != 0 {
			c.IssuedAt = &p[0]
		}
		if seen&seenNbf != 0 {
			c.NotBefore = &p[1]
		}
		if seen&seenExp != 0 {
			c.ExpiresAt = &p[2]
		}
	}
	return true
}

// member decodes the value of the claim key into c (a date into dates),
// returning the claim's bit; false for a key FireClaims does not name
// exactly or a value not in the plain form.
func (d *plainJSON) member(key string, c *contract.FireClaims, dates *[3]jwt.NumericDate) (int, bool) {
	var (
		str *string
		bit int
	)
	switch key {
	case "iss":
		str, bit = &c.Issuer, seenIss
	case "aud":
		str, bit = &c.Audience, seenAud
	case "purpose":
		str, bit = &c.Purpose, seenPurpose
	case "jti":
		str, bit = &c.ID, seenJti
	case "job_id":
		str, bit = &c.JobID, seenJobID
	case "fire_at":
		str, bit = &c.FireAt, seenFireAt
	case "schedule_id":
		str, bit = &c.ScheduleID, seenScheduleID
	case "bh":
		str, bit = &c.BodyHash, seenBodyHash
	case "attempt":
		n, ok := d.uint(maxAttemptDigits)
		c.Attempt = int(n)
		return seenAttempt, ok
	case "iat", "nbf", "exp":
		n, ok := d.uint(maxDateDigits)
		i, bit := dateSlot(key)
		dates[i] = *jwt.NewNumericDate(time.Unix(n, 0))
		return bit, ok
	default:
		return 0, false
	}
	v, ok := d.str()
	*str = v
	return bit, ok
}

// dateSlot is where decodePlainFireClaims keeps the date claim key, and its bit.
func dateSlot(key string) (int, int) {
	switch key {
	case "iat":
		return 0, seenIat
	case "nbf":
		return 1, seenNbf
	default:
		return 2, seenExp
	}
}

// plainJSON reads the plain JSON form decodePlainFireClaims accepts; every
// method reports false where s leaves that form.
type plainJSON struct {
	s string
	i int
}

// space skips JSON whitespace.
func (d *plainJSON) space() {
	for d.i < len(d.s) {
		switch d.s[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// want consumes the byte b after any whitespace.
func (d *plainJSON) want(b byte) bool {
	d.space()
	if d.i < len(d.s) && d.s[d.i] == b {
		d.i++
		return true
	}
	return false
}

func (d *plainJSON) open() bool  { return d.want('{') }
func (d *plainJSON) colon() bool { return d.want(':') }

// firstMember reports whether the object has a member (false for {}).
func (d *plainJSON) firstMember() bool {
	d.space()
	if d.i < len(d.s) && d.s[d.i] == '}' {
		d.i++
		return false
	}
	return true
}

// next consumes a comma (more members follow) or the closing brace.
func (d *plainJSON) next() (more, ok bool) {
	d.space()
	if d.i >= len(d.s) {
		return false, false
	}
	switch d.s[d.i] {
	case ',':
		d.i++
		return true, true
	case '}':
		d.i++
		return false, true
	}
	return false, false
}

// end reports whether only whitespace follows the object.
func (d *plainJSON) end() bool {
	d.space()
	return d.i == len(d.s)
}

// str reads a string without escapes whose bytes are printable ASCII.
func (d *plainJSON) str() (string, bool) {
	if !d.want('"') {
		return "", false
	}
	start := d.i
	for ; d.i < len(d.s); d.i++ {
		switch b := d.s[d.i]; {
		case b == '"':
			v := d.s[start:d.i]
			d.i++
			return v, true
		case b < 0x20 || b >= 0x80 || b == '\\':
			return "", false
		}
	}
	return "", false
}

// uint reads a non-negative integer of at most maxDigits digits, without
// leading zeros (as JSON requires), fraction or exponent.
func (d *plainJSON) uint(maxDigits int) (int64, bool) {
	d.space()
	start := d.i
	var n int64
	for d.i < len(d.s) && d.s[d.i] >= '0' && d.s[d.i] <= '9' {
		n = n*10 + int64(d.s[d.i]-'0')
		d.i++
	}
	digits := d.i - start
	switch {
	case digits == 0 || digits > maxDigits:
		return 0, false
	case digits > 1 && d.s[start] == '0':
		return 0, false
	}
	// A fraction or exponent would follow at once; anything else is the
	// next token's business.
	if d.i < len(d.s) {
		switch d.s[d.i] {
		case '.', 'e', 'E':
			return 0, false
		}
	}
	return n, true
}
