package relaybench

import (
	"strings"
	"testing"
)

func TestWriteTextRedisLine(t *testing.T) {
	for _, tc := range []struct {
		name  string
		res   Result
		want  string // in the output; "" for no redis line
		avoid string
	}{
		{"memory", Result{Store: "memory"}, "", "redis:"},
		{"measured", Result{Store: "redis", BytesPerArmed: 352, RedisCPUFireUs: 27}, "redis:  352 bytes per armed one-shot, 27µs Redis CPU per fire", "not measured"},
		{"freed meanwhile", Result{Store: "redis", BytesPerArmed: -12, RedisCPUFireUs: 31}, "not measured (Redis freed other keys meanwhile), 31µs Redis CPU per fire", "-12"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			tc.res.WriteText(&b)
			out := b.String()
			if tc.want != "" && !strings.Contains(out, tc.want) {
				t.Errorf("output lacks %q:\n%s", tc.want, out)
			}
			if tc.want == "" && strings.Contains(out, "redis:") {
				t.Errorf("output has a redis line:\n%s", out)
			}
			if strings.Contains(out, tc.avoid) {
				t.Errorf("output has %q:\n%s", tc.avoid, out)
			}
		})
	}
}
