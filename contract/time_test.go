package contract_test

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/contract"
)

func TestParseTimeAccepts(t *testing.T) {
	t.Parallel()
	utc := func(y int, mo time.Month, d, h, mi, s, ns int) time.Time {
		return time.Date(y, mo, d, h, mi, s, ns, time.UTC)
	}
	for _, tc := range []struct {
		in   string
		want time.Time
	}{
		{"2026-06-18T09:00:00Z", utc(2026, 6, 18, 9, 0, 0, 0)},
		{"2026-06-18T09:00:00+05:30", utc(2026, 6, 18, 3, 30, 0, 0)},
		{"2026-06-18T09:00:00-14:00", utc(2026, 6, 18, 23, 0, 0, 0)},
		{"2026-06-18T09:00:00+14:00", utc(2026, 6, 17, 19, 0, 0, 0)},
		{"2026-06-18T09:00:00+00:00", utc(2026, 6, 18, 9, 0, 0, 0)},
		{"2026-06-18T09:00:00-00:00", utc(2026, 6, 18, 9, 0, 0, 0)},
		{"2026-06-18T09:00:00.123456789Z", utc(2026, 6, 18, 9, 0, 0, 123456789)},
		{"2026-06-18T09:00:00.5Z", utc(2026, 6, 18, 9, 0, 0, 500000000)},
		{"2026-06-18T09:00:00.000Z", utc(2026, 6, 18, 9, 0, 0, 0)},
		{"2026-06-18t09:00:00z", utc(2026, 6, 18, 9, 0, 0, 0)},
		{"2024-02-29T23:59:59Z", utc(2024, 2, 29, 23, 59, 59, 0)},
		{"2000-02-29T00:00:00Z", utc(2000, 2, 29, 0, 0, 0, 0)},
		{"2026-12-31T23:59:59.999999999Z", utc(2026, 12, 31, 23, 59, 59, 999999999)},
		{"1970-01-01T00:00:00Z", utc(1970, 1, 1, 0, 0, 0, 0)},
		{"9999-12-31T23:59:59Z", utc(9999, 12, 31, 23, 59, 59, 0)},
	} {
		got, err := contract.ParseTime(tc.in)
		if err != nil {
			t.Errorf("ParseTime(%q): %v", tc.in, err)
			continue
		}
		if !got.Equal(tc.want) {
			t.Errorf("ParseTime(%q) = %s, want %s", tc.in, got, tc.want)
		}
		// The offset as written is kept.
		if _, off := got.Zone(); strings.HasSuffix(tc.in, "+05:30") && off != 5*3600+30*60 {
			t.Errorf("ParseTime(%q): offset %d s, want +05:30", tc.in, off)
		}
	}
}

func TestParseTimeRejects(t *testing.T) {
	t.Parallel()
	for _, in := range []string{
		"",
		"2026-06-18",
		"2026-06-18T1:00:00Z",             // one-digit hour (Go's time.Parse accepts it)
		"2026-06-18T09:00:00,5Z",          // comma fraction (Go accepts it)
		"2026-06-18T09:00:00+24:00",       // Go accepts it
		"2026-06-18T09:00:00+14:01",       // beyond +14:00
		"2026-06-18T09:00:00-14:01",       // beyond -14:00
		"2026-06-18T09:00:00+05:60",       // minute of offset out of range
		"2026-06-18T09:00:00.1234567890Z", // 10 fraction digits
		"2026-06-18T09:00:00.Z",           // empty fraction
		"20260-06-18T09:00:00Z",           // 5-digit year
		"+2026-06-18T09:00:00Z",
		"-2026-06-18T09:00:00Z",
		"2026-06-18T23:59:60Z", // leap second
		"2026-12-31T23:59:60Z",
		"2026-06-18T09:00:00", // no offset
		"2026-06-18T09:00:00.5",
		"2026-06-18 09:00:00Z", // space separator
		"2026-06-18_09:00:00Z",
		"2026-02-30T09:00:00Z",
		"2025-02-29T09:00:00Z", // not a leap year
		"1900-02-29T09:00:00Z", // not a leap year either
		"2026-04-31T09:00:00Z",
		"2026-00-10T09:00:00Z",
		"2026-13-10T09:00:00Z",
		"2026-06-00T09:00:00Z",
		"2026-06-18T24:00:00Z",
		"2026-06-18T09:60:00Z",
		"2026-06-18T09:00:00Zjunk", // trailing junk
		"2026-06-18T09:00:00Z ",
		" 2026-06-18T09:00:00Z",
		"2026-06-18T09:00:00+05:30x",
		"2026-06-18T09:00:00+0530", // offset without colon
		"2026-06-18T09:00:00+05",
		"2026-06-18T09:00:00UTC",
		"2026-06-18T09:00:00GMT+1",
		"2026-6-18T09:00:00Z",
		"2026/06/18T09:00:00Z",
		"2026-06-18T09.00.00Z",
		"２０２６-06-18T09:00:00Z", // full-width digits
		"1969-12-31T23:59:59Z", // before the Unix epoch
		"1970-01-01T00:00:00+00:01",
		"0001-01-01T00:00:00Z",      // the zero time: "absent" in this package
		"9999-12-31T23:59:59-00:01", // past year 9999 in UTC
		"null",
	} {
		if got, err := contract.ParseTime(in); err == nil {
			t.Errorf("ParseTime(%q) = %s, want an error", in, got)
		} else if !strings.Contains(err.Error(), "RFC 3339") {
			t.Errorf("ParseTime(%q): error %q does not say what is expected", in, err)
		}
	}
}

func TestTimeJSON(t *testing.T) {
	t.Parallel()
	in, err := contract.ParseTime("2026-06-18T09:00:00.250+05:30")
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(contract.NewTime(in))
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `"2026-06-18T03:30:00.25Z"` {
		t.Errorf("Marshal = %s, want UTC with the shortest exact fraction", b)
	}
	var back contract.Time
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("Unmarshal(%s): %v", b, err)
	}
	if !back.Equal(in) {
		t.Errorf("round trip: %s, want %s", back, in)
	}
	if got := contract.NewTime(in).String(); got != "2026-06-18T03:30:00.25Z" {
		t.Errorf("String() = %q", got)
	}

	// The zero Time is written as null ...
	if b, err := json.Marshal(contract.Time{}); err != nil || string(b) != "null" {
		t.Errorf("Marshal(zero) = %s, %v; want null", b, err)
	}
	// ... and null, non-strings and lax forms are refused when read, also
	// inside a struct (encoding/json hands null to UnmarshalJSON).
	for _, raw := range []string{`null`, `0`, `true`, `{}`, `[]`, `"2026-06-18T9:00:00Z"`, `"2026-06-18 09:00:00Z"`, `""`} {
		var v contract.Time
		if err := json.Unmarshal([]byte(raw), &v); err == nil {
			t.Errorf("Unmarshal(%s) into Time: want an error", raw)
		}
		var s struct {
			At contract.Time `json:"at"`
		}
		if err := json.Unmarshal([]byte(`{"at":`+raw+`}`), &s); err == nil {
			t.Errorf("Unmarshal({\"at\":%s}): want an error", raw)
		}
	}
}

// A Time read from the wire is written back byte for byte; the spelling can
// be kept apart from the instant and restored.
func TestTimeKeepsSpelling(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in        string
		canonical string
	}{
		{"2026-12-01T09:00:00+02:00", "2026-12-01T07:00:00Z"},
		{"2026-12-01T09:00:00-00:00", "2026-12-01T09:00:00Z"},
		{"2026-12-01T09:00:00+00:00", "2026-12-01T09:00:00Z"},
		{"2026-12-01T09:00:00.000Z", "2026-12-01T09:00:00Z"},
		{"2026-12-01T09:00:00.500+05:30", "2026-12-01T03:30:00.5Z"},
		{"2026-12-01t09:00:00z", "2026-12-01T09:00:00Z"},
		{"2026-12-01T09:00:00.25Z", "2026-12-01T09:00:00.25Z"},
		{"2026-12-01T09:00:00Z", "2026-12-01T09:00:00Z"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			var s struct {
				At contract.Time `json:"at"`
			}
			body := `{"at":"` + tc.in + `"}`
			if err := json.Unmarshal([]byte(body), &s); err != nil {
				t.Fatal(err)
			}
			out, err := json.Marshal(s)
			if err != nil || string(out) != body {
				t.Fatalf("Marshal = %s, %v; want %s", out, err, body)
			}
			want := ""
			if tc.in != tc.canonical {
				want = tc.in
			}
			if s.At.Text() != tc.in || s.At.Spelling() != want || s.At.String() != tc.canonical {
				t.Fatalf("Text %q Spelling %q String %q", s.At.Text(), s.At.Spelling(), s.At.String())
			}
			// Kept apart from the instant (as NAS stores it) and restored.
			back := contract.NewTimeSpelled(s.At.UTC(), s.At.Spelling())
			if back.Text() != tc.in || !back.Equal(s.At.Time) {
				t.Fatalf("NewTimeSpelled = %q", back.Text())
			}
			// NewTime writes the canonical form whatever the zone.
			if got := contract.NewTime(s.At.Time).Text(); got != tc.canonical {
				t.Fatalf("NewTime(...).Text() = %q, want %q", got, tc.canonical)
			}
		})
	}

	// A spelling of another instant, or no RFC 3339 at all, is not used.
	at := time.Date(2026, 12, 1, 7, 0, 0, 0, time.UTC)
	for _, bad := range []string{"2026-12-01T09:00:00+01:00", "tomorrow", "2026-12-01T9:00:00+02:00", `2026-12-01T09:00:00+02:00"`} {
		if got := contract.NewTimeSpelled(at, bad).Text(); got != "2026-12-01T07:00:00Z" {
			t.Errorf("NewTimeSpelled(%q) = %q, want the canonical form", bad, got)
		}
	}

	// Reading into a Time that held another spelling forgets it.
	var v contract.Time
	for _, in := range []string{`"2026-12-01T09:00:00+02:00"`, `"2026-12-01T07:00:00Z"`} {
		if err := json.Unmarshal([]byte(in), &v); err != nil {
			t.Fatal(err)
		}
		if out, _ := json.Marshal(v); string(out) != in {
			t.Fatalf("Marshal after Unmarshal(%s) = %s", in, out)
		}
	}
}

// strictRFC3339 is the grammar ParseTime implements, written independently.
var strictRFC3339 = regexp.MustCompile(`^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?([Zz]|[+-][0-9]{2}:[0-9]{2})$`)

func FuzzParseTime(f *testing.F) {
	for _, s := range []string{
		"2026-06-18T09:00:00Z", "2026-06-18T09:00:00+05:30", "2026-06-18T09:00:00-14:00",
		"2026-06-18T09:00:00.123456789Z", "2026-06-18t09:00:00z", "2026-06-18T1:00:00Z",
		"2026-06-18T09:00:00,5Z", "2026-06-18T09:00:00+24:00", "2026-06-18T23:59:60Z",
		"2024-02-29T12:00:00Z", "0000-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00",
		"2026-06-18T09:00:00.Z", "2026-06-18T09:00:00.1234567890Z", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := contract.ParseTime(s)
		if err != nil {
			return
		}
		if !strictRFC3339.MatchString(s) {
			t.Fatalf("ParseTime accepted %q, which is not strict RFC 3339", s)
		}
		// Everything accepted is also valid for Go's laxer parser, as the same instant.
		std, err := time.Parse(time.RFC3339Nano, strings.ToUpper(s))
		if err != nil {
			t.Fatalf("ParseTime accepted %q, time.Parse refuses it: %v", s, err)
		}
		if !std.Equal(got) {
			t.Fatalf("ParseTime(%q) = %s, time.Parse = %s", s, got, std)
		}
		// Written back, it parses again to the same instant.
		out := contract.FormatTime(got)
		again, err := contract.ParseTime(out)
		if err != nil {
			t.Fatalf("ParseTime(%q) = %s, formatted as %q, which does not parse: %v", s, got, out, err)
		}
		if !again.Equal(got) {
			t.Fatalf("ParseTime(%q) = %s; round trip through %q gives %s", s, got, out, again)
		}
		if got.IsZero() {
			t.Fatalf("ParseTime(%q) is the zero time", s)
		}
	})
}
