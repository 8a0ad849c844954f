package node_test

import (
	"testing"

	"github.com/chronoscron/chronos/nas/node"
)

// TestStoreKind: every store setting is named by its engine, never by its
// URL (which may hold a password).
func TestStoreKind(t *testing.T) {
	t.Parallel()
	for store, want := range map[string]string{
		"memory":                                 node.StoreMemory,
		"redis://:pw@127.0.0.1:6379/0":           node.StoreRedis,
		"rediss+cluster://10.0.0.1:7000":         node.StoreRedis,
		"redis+sentinel://h:26379?master_name=m": node.StoreRedis,
		"postgres://chronos:pw@db/chronos":       node.StorePostgres,
		"postgresql://db/chronos?schema=c":       node.StorePostgres,
	} {
		if got := node.StoreKind(store); got != want {
			t.Errorf("StoreKind(%q) = %q, want %q", store, got, want)
		}
	}
}

// TestMigrationString: what chronos nas migrate prints for each outcome.
func TestMigrationString(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		m    node.Migration
		want string
	}{
		{node.Migration{Store: node.StorePostgres, Schema: "chronos", From: 0, To: 2, Applied: []string{"0001_queue", "0002_records"}},
			"schema chronos: version 0 → 2 (applied 0001_queue, 0002_records)"},
		{node.Migration{Store: node.StorePostgres, Schema: "chronos", From: 2, To: 2, Applied: []string{}},
			"schema chronos: at version 2, nothing to do"},
		{node.Migration{Store: node.StoreRedis}, "store redis: no schema, nothing to migrate"},
		{node.Migration{Store: node.StoreMemory}, "store memory: no schema, nothing to migrate"},
	} {
		if got := tt.m.String(); got != tt.want {
			t.Errorf("%+v: %q, want %q", tt.m, got, tt.want)
		}
	}
}
