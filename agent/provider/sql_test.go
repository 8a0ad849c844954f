package provider_test

import (
	"strings"
	"testing"

	"github.com/chronoscron/chronos/agent/inputs"
	"github.com/chronoscron/chronos/agent/provider"
)

func TestSQLDatabases(t *testing.T) {
	c, err := provider.ParseConfig([]byte("home: /h\nsql:\n  dsns:\n    - main=sqlite:/var/lib/t.db\n    - pg=postgres://u@db.example/targets\n"))
	if err != nil {
		t.Fatal(err)
	}
	dbs, err := c.SQL.Databases()
	if err != nil {
		t.Fatal(err)
	}
	if dbs["main"] != (inputs.DSN{Driver: inputs.DriverSQLite, Source: "/var/lib/t.db"}) ||
		dbs["pg"] != (inputs.DSN{Driver: inputs.DriverPostgres, Source: "postgres://u@db.example/targets"}) || len(dbs) != 2 {
		t.Fatalf("databases %+v", dbs)
	}
	if err := c.ApplyEnv(func(k string) (string, bool) {
		return "x=sqlite:/x.db,y=sqlite:/y.db", k == "CHRONOS_SQL_DSNS"
	}); err != nil {
		t.Fatal(err)
	}
	if got := c.SQLDatabases(); len(got) != 2 || got["x"].Source != "/x.db" {
		t.Fatalf("from the environment: %+v", got)
	}
	for _, bad := range []string{"nameless", "a=mysql://x", "a=sqlite:/1,a=sqlite:/2"} {
		c.SQL.DSNs = strings.Split(bad, ",")
		c.Listen = "127.0.0.1:1"
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "sql.dsns") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}
