package main

import (
	"os"
	"testing"

	"github.com/chronoscron/chronos/internal/pgtest"
)

// TestMain keeps the agents the tests start off the fixed local API
// address (127.0.0.1:8788), which parallel tests and other packages would
// contend for: a test that wants the local API sets CHRONOS_UI_LISTEN
// itself (to 127.0.0.1:0). The PostgreSQL the store tests start, if any,
// is stopped when they end.
func TestMain(m *testing.M) {
	if _, set := os.LookupEnv("CHRONOS_UI_LISTEN"); !set {
		_ = os.Setenv("CHRONOS_UI_LISTEN", "off")
	}
	pgtest.Main(m)
}
