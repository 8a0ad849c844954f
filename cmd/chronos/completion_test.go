package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCompletionOffersJobIDsAndFlagValues: shell completion offers the
// home's job ids (with their schedules) for the commands and flags that
// take one, and the values of the flags that take one of a few words; it
// creates nothing in a home that does not exist.
func TestCompletionOffersJobIDsAndFlagValues(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	mustCLI(t, "jobs", "add", "--home", home, "--id", "backup", "--schedule", "daily at 3am", "--", "true")
	mustCLI(t, "jobs", "add", "--home", home, "--id", "brief", "--schedule", "every 1h", "--", "true")
	mustCLI(t, "jobs", "add", "--home", home, "--id", "digest", "--schedule", "every 2h", "--", "true")
	missing := filepath.Join(t.TempDir(), "none")
	for _, tc := range []struct {
		name string
		args []string
		want []string
		not  []string
	}{
		{"jobs show", []string{"jobs", "show", "--home", home, "b"}, []string{"backup\tdaily at 3am", "brief\tevery 1h"}, []string{"digest"}},
		{"jobs rm", []string{"jobs", "rm", "--home", home, ""}, []string{"backup", "brief", "digest"}, nil},
		{"jobs run, second argument", []string{"jobs", "run", "--home", home, "backup", ""}, nil, []string{"backup", "brief"}},
		{"runs list --job", []string{"runs", "list", "--home", home, "--job", "d"}, []string{"digest\tevery 2h"}, []string{"backup"}},
		{"--misfire", []string{"jobs", "add", "--misfire", ""}, []string{"run_once", "skip", "run_all"}, nil},
		{"--overlap", []string{"jobs", "edit", "--home", home, "backup", "--overlap", "q"}, []string{"queue_one"}, nil},
		{"--kind", []string{"jobs", "add", "--kind", ""}, []string{"plain", "workflow", "fanout"}, nil},
		{"a home that does not exist", []string{"jobs", "show", "--home", missing, ""}, nil, []string{"backup"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, out, _ := cli(t, append([]string{"__complete"}, tc.args...)...)
			lines := strings.Split(out, "\n")
			has := func(s string) bool {
				for _, l := range lines {
					if l == s || strings.HasPrefix(l, s+"\t") {
						return true
					}
				}
				return false
			}
			for _, w := range tc.want {
				if !has(w) {
					t.Errorf("completion lacks %q:\n%s", w, out)
				}
			}
			for _, n := range tc.not {
				if has(n) {
					t.Errorf("completion offers %q:\n%s", n, out)
				}
			}
		})
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Errorf("completion created the home it was pointed at: %v", err)
	}
}
