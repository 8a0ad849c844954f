package fireauth_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/chronoscron/chronos/agent/fireauth"
)

// TestDocsTellTheUnknownKIDLimit: the agent's and the operator's guides
// state the limit on key set fetches for unknown kids that the verifier
// applies, and no other.
func TestDocsTellTheUnknownKIDLimit(t *testing.T) {
	want := fmt.Sprintf("once per %d s", int(fireauth.DefaultUnknownKIDInterval.Seconds()))
	for _, doc := range []string{"../../docs/agent.md", "../../docs/operations.md"} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		text := strings.Join(strings.Fields(string(b)), " ")
		if !strings.Contains(text, want) {
			t.Errorf("%s does not say unknown kids fetch the key set at most %s", doc, want)
		}
		if strings.Contains(text, "burst of 2 and then one per 30 s") {
			t.Errorf("%s still tells the old limit (a burst of 2, then one per 30 s)", doc)
		}
	}
}
