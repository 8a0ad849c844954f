package relaybench_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/internal/relaybench"
)

// TestRunDeliversEveryFire runs a small burst on the memory store: every
// fire is delivered once and verified, and the text report says so.
func TestRunDeliversEveryFire(t *testing.T) {
	t.Parallel()
	o := relaybench.Options{Store: "memory", N: 200, At: 200 * time.Millisecond, Agents: 5, Dispatchers: 2, Concurrency: 8, ArmWorkers: 4, Alg: "EdDSA"}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := relaybench.Run(ctx, o, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if res.Delivered != 200 || res.Lost != 0 || res.Failed != 0 || res.Verified < 200 || res.SigningAlg != "EdDSA" || res.Store != "memory" {
		t.Fatalf("result %+v", res)
	}
	var out bytes.Buffer
	res.WriteText(&out)
	if !strings.Contains(out.String(), "200 verified, 0 failed") {
		t.Fatalf("report %q", out.String())
	}
}

func TestOptionsAndParsers(t *testing.T) {
	t.Parallel()
	for _, o := range []relaybench.Options{{N: 0, Agents: 1, Dispatchers: 1, Concurrency: 1, ArmWorkers: 1}, {N: 1, Agents: 1, Dispatchers: 1, Concurrency: 1, ArmWorkers: 1, Alg: "HS256"}} {
		if err := o.Validate(); err == nil {
			t.Errorf("%+v validated", o)
		}
	}
	if o := (relaybench.Options{Rate: 10, Agents: 1, Dispatchers: 1, Concurrency: 1, ArmWorkers: 1}); o.Validate() == nil {
		t.Error("a rate without a duration validated")
	}
	o := relaybench.Options{Rate: 400, Duration: 500 * time.Millisecond, Agents: 1, Dispatchers: 1, Concurrency: 1, ArmWorkers: 1}
	if err := o.Validate(); err != nil || o.N != 200 || o.Alg != "ES256" || o.Timeout <= o.Duration {
		t.Errorf("Validate: %v, options %+v", err, o)
	}
	if r, err := relaybench.ParseRate("600/m"); err != nil || r != 10 {
		t.Errorf("ParseRate 600/m = %v, %v", r, err)
	}
	for _, s := range []string{"fast", "10/h", "-1", "0"} {
		if _, err := relaybench.ParseRate(s); err == nil {
			t.Errorf("ParseRate(%q) passed", s)
		}
	}
	if d, err := relaybench.ParseOffset("+2s"); err != nil || d != 2*time.Second {
		t.Errorf("ParseOffset +2s = %v, %v", d, err)
	}
	if _, err := relaybench.ParseOffset("-1s"); err == nil {
		t.Error("ParseOffset -1s passed")
	}
}
