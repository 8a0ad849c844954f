package agenthttp

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestREADMEListsEveryFireOutcome: the README's list of the outcomes of
// chronos_agent_fires_total is the counter's own list, no more, no less.
func TestREADMEListsEveryFireOutcome(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("`chronos_agent_fires_total\\{outcome\\}`\\s*\\(([^)]*)\\)").FindSubmatch(b)
	if m == nil {
		t.Fatal("README.md does not list the outcomes of chronos_agent_fires_total{outcome}")
	}
	var listed []string
	for _, w := range regexp.MustCompile("`([a-z_]+)`").FindAllSubmatch(m[1], -1) {
		listed = append(listed, string(w[1]))
	}
	if strings.Join(listed, ",") != strings.Join(fireOutcomes, ",") {
		t.Errorf("README.md lists %v, the counter has %v", listed, fireOutcomes)
	}
}
