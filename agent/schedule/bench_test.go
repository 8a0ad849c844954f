package schedule

import (
	"math/rand/v2"
	"testing"
	"time"

	robfig "github.com/robfig/cron/v3"
)

// benchExprs are common lines; each is measured with this package and, beside
// it, with robfig/cron/v3 (which gets DST days wrong, but is the usual yardstick).
var benchExprs = []string{
	"*/5 * * * *",
	"0 9 * * 1-5",
	"0 0 1 * *",
	"CRON_TZ=America/New_York 30 2 * * *",
	"0 0 29 2 *",
}

// benchInstants are 1024 instants spread over 2026, so every call starts from
// a different place.
func benchInstants() []time.Time {
	r := rand.New(rand.NewPCG(1, 2))
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	out := make([]time.Time, 1024)
	for i := range out {
		out[i] = time.Unix(base+r.Int64N(365*secondsPerDay), 0)
	}
	return out
}

// BenchmarkNext reports ns per Next call: BenchmarkNext/<expr>/chronos and
// BenchmarkNext/<expr>/robfig.
func BenchmarkNext(b *testing.B) {
	at := benchInstants()
	for _, expr := range benchExprs {
		b.Run(expr, func(b *testing.B) {
			b.Run("chronos", func(b *testing.B) {
				s, err := Parse(expr, Options{Anchor: at[0]})
				if err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					if _, ok := s.Next(at[i&1023]); !ok {
						b.Fatal("no next fire")
					}
					i++
				}
			})
			b.Run("robfig", func(b *testing.B) {
				s, err := robfig.ParseStandard(expr)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					if s.Next(at[i&1023]).IsZero() {
						b.Fatal("no next fire")
					}
					i++
				}
			})
		})
	}
}

// BenchmarkParse reports the cost of reading a line (including the
// never-fires check and the period estimate).
func BenchmarkParse(b *testing.B) {
	anchor := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, expr := range []string{"0 9 * * 1-5", "every monday 9am", "CRON_TZ=America/New_York 30 2 * * *"} {
		b.Run(expr, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Parse(expr, Options{Anchor: anchor}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
