package relay_test

import (
	"context"
	"testing"
	"time"

	"github.com/chronoscron/chronos/relay"
)

func TestCallTimeout(t *testing.T) {
	t.Parallel()
	if _, ok := relay.CallTimeout(context.Background()); ok {
		t.Fatal("a plain context has a call timeout")
	}
	ctx := relay.WithCallTimeout(context.Background(), 1500*time.Millisecond)
	if d, ok := relay.CallTimeout(ctx); !ok || d != 1500*time.Millisecond {
		t.Fatalf("CallTimeout = %s, %v; want 1.5s", d, ok)
	}
	// It survives the contexts derived from it, WithoutCancel included.
	if d, ok := relay.CallTimeout(context.WithoutCancel(ctx)); !ok || d != 1500*time.Millisecond {
		t.Fatalf("CallTimeout of a derived context = %s, %v", d, ok)
	}
	if _, ok := relay.CallTimeout(relay.WithCallTimeout(ctx, 0)); ok {
		t.Fatal("a zero call timeout counts as a bound")
	}
}
