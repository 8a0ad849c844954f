package runs

import (
	"fmt"
	"os"
	"testing"

	"github.com/chronoscron/chronos/agent/job"
)

func TestOwners(t *testing.T) {
	t.Parallel()
	self := job.Owner{Host: "h", PID: os.Getpid(), ID: "me"}
	tests := []struct {
		name  string
		claim job.Claim
		want  Liveness
	}{
		{"self", job.Claim{Owner: self.String()}, OwnerSelf},
		{"earlier life of this pid", job.Claim{Owner: fmt.Sprintf("h:%d:earlier", os.Getpid())}, OwnerGone},
		{"other host", job.Claim{Owner: "other:1:x"}, OwnerUnknown},
		{"live pid without start time", job.Claim{Owner: "h:1:x"}, OwnerUnknown},
		{"garbage", job.Claim{Owner: "garbage"}, OwnerUnknown},
		{"dead pid", job.Claim{Owner: "h:2147483646:x"}, OwnerGone},
		{"other host with start time", job.Claim{Owner: "elsewhere:1:x", OwnerBoot: "b", OwnerStart: 1}, OwnerUnknown},
	}
	for _, tc := range tests {
		if got := Judge(tc.claim, self, Where{Boot: "this-boot", NS: "pid:[1]"}); got != tc.want {
			t.Errorf("%s: Judge(%+v) = %v, want %v", tc.name, tc.claim, got, tc.want)
		}
	}
	if o, err := job.ParseOwner("host:with:colons:42:abc"); err != nil || o.Host != "host:with:colons" || o.PID != 42 || o.ID != "abc" {
		t.Fatalf("ParseOwner: %+v %v", o, err)
	}
}
