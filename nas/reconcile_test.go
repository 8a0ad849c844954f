package nas_test

import (
	"testing"

	"github.com/chronoscron/chronos/nas"
)

func TestReconcileURL(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"https://agent.example":                  "https://agent.example/api/cron/reconcile",
		"https://agent.example/":                 "https://agent.example/api/cron/reconcile",
		"https://agent.example/a/b":              "https://agent.example/a/b/api/cron/reconcile",
		"https://agent.example/api/cron/fire":    "https://agent.example/api/cron/reconcile",
		"https://agent.example/x/api/cron/fire/": "https://agent.example/x/api/cron/reconcile",
	} {
		if got := nas.ReconcileURL(in); got != want {
			t.Errorf("ReconcileURL(%q) = %q, want %q", in, got, want)
		}
	}
}
