package contract_test

import (
	"encoding/json"
	"testing"

	"github.com/chronoscron/chronos/contract"
)

// TestAppendJSONStringIsJSONMarshal: every string comes out as
// json.Marshal writes it, after what was there.
func TestAppendJSONStringIsJSONMarshal(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "plain-job_1.x", "2026-06-18T09:00:00+02:00", `quote"`, `back\slash`, "<tag>&amp;",
		"tab\tnewline\n", "\x00\x1f\x7f", "naïve ☃", "\xff\xfe bad utf-8", "\u2028\u2029"} {
		want, _ := json.Marshal(s)
		if got := contract.AppendJSONString([]byte("x:"), s); string(got) != "x:"+string(want) {
			t.Errorf("AppendJSONString(%q) = %s, want x:%s", s, got, want)
		}
	}
}
