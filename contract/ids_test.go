package contract

import (
	"strings"
	"testing"
	"time"
)

func TestValidJobID(t *testing.T) {
	for _, tc := range []struct {
		id   string
		want bool
	}{
		{"daily-report", true},
		{"a.b_c-9", true},
		{strings.Repeat("x", 128), true},
		{strings.Repeat("x", 129), false},
		{"", false},
		{"has space", false},
		{"slash/no", false},
		{"é", false},
	} {
		if got := ValidJobID(tc.id); got != tc.want {
			t.Errorf("ValidJobID(%q) = %v, want %v", tc.id, got, tc.want)
		}
	}
}

func TestBearerToken(t *testing.T) {
	for _, tc := range []struct {
		header, tok string
		ok          bool
	}{
		{"Bearer abc", "abc", true},
		{"bearer abc", "abc", true},
		{"BEARER  abc ", "abc", true},
		{"Basic abc", "", false},
		{"Bearer", "", false},
		{"Bearer ", "", false},
		{"Bearer a b", "", false},
		{"Bearer " + strings.Repeat("t", 8193), "", false},
		{"", "", false},
	} {
		tok, ok := BearerToken(tc.header)
		if tok != tc.tok || ok != tc.ok {
			t.Errorf("BearerToken(%q) = %q, %v; want %q, %v", tc.header, tok, ok, tc.tok, tc.ok)
		}
	}
}

func TestDaysInMatchesTime(t *testing.T) {
	for _, y := range []int{1900, 1999, 2000, 2024, 2026, 2100, 2400} {
		for m := time.January; m <= time.December; m++ {
			// The day before the first of the next month.
			want := time.Date(y, m+1, 0, 0, 0, 0, 0, time.UTC).Day()
			if got := DaysIn(y, m); got != want {
				t.Errorf("DaysIn(%d, %s) = %d, want %d", y, m, got, want)
			}
		}
	}
}
