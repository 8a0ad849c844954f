package schedule

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// readVectors loads testdata/schedule/vectors.txt as next-fire cases.
func readVectors(t *testing.T) []nextCase {
	t.Helper()
	path := filepath.Join("..", "..", "testdata", "schedule", "vectors.txt")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read vectors: %v", err)
	}
	var cases []nextCase
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		parts := strings.Split(line, "|")
		if len(parts) != 4 {
			t.Fatalf("%s:%d: want 4 fields separated by |, got %d", path, i+1, len(parts))
		}
		tz := strings.TrimSpace(parts[1])
		if tz == "-" {
			tz = ""
		}
		expr := strings.TrimSpace(parts[0])
		cases = append(cases, nextCase{
			name:  expr + " in " + tz + " after " + strings.TrimSpace(parts[2]),
			expr:  expr,
			tz:    tz,
			after: strings.TrimSpace(parts[2]),
			want:  strings.Fields(parts[3]),
		})
	}
	if len(cases) == 0 {
		t.Fatalf("%s holds no vectors", path)
	}
	return cases
}

func TestNextVectors(t *testing.T) {
	t.Parallel()
	runNextCases(t, readVectors(t))
}
