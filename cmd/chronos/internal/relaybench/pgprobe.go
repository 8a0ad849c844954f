package relaybench

import (
	"context"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// pgProbe reads what a run costs PostgreSQL: the size of the run's schema
// (tables, their indexes and TOAST) and, when the server runs on this
// machine, the CPU time of its processes.
type pgProbe struct {
	conn   *pgx.Conn
	schema string
	// postmaster is the server's postmaster pid when the server runs on
	// this machine (its processes' CPU is readable here), else 0.
	postmaster int
}

// newPGProbe connects to the server of store to watch schema.
func newPGProbe(ctx context.Context, store, schema string) (*pgProbe, error) {
	conn, err := connectServer(ctx, store)
	if err != nil {
		return nil, err
	}
	p := &pgProbe{conn: conn, schema: schema}
	if loopbackHost(store) {
		var backend int
		if err := conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&backend); err == nil {
			if st, ok := readStat(backend); ok && st.comm == "postgres" {
				p.postmaster = st.ppid
			}
		}
	}
	return p, nil
}

// close closes the probe's connection.
func (p *pgProbe) close() { _ = p.conn.Close(context.Background()) }

// bytes returns the size on disk of the schema's tables with their
// indexes and TOAST.
func (p *pgProbe) bytes(ctx context.Context) (int64, error) {
	var n int64
	err := p.conn.QueryRow(ctx, `SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relkind = 'r'`, p.schema).Scan(&n)
	return n, err
}

// analyze updates the planner's statistics of the run's queue tables, as
// autovacuum does within a minute for a table this busy: a store that has
// run for a while has them, and a run that had just filled its fresh schema
// would measure plans made for empty tables instead.
func (p *pgProbe) analyze(ctx context.Context) error {
	for _, t := range []string{"chronos_fires", "chronos_agents", "chronos_ties"} {
		if _, err := p.conn.Exec(ctx, "ANALYZE "+pgx.Identifier{p.schema, t}.Sanitize()); err != nil {
			return err
		}
	}
	return nil
}

// cpu returns the user and system CPU seconds of the server's processes
// alive now (its postmaster and the postmaster's children), 0 when the
// server is not on this machine.
func (p *pgProbe) cpu() float64 {
	if p.postmaster == 0 {
		return 0
	}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var ticks int64
	for _, f := range stats {
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(f)))
		if err != nil {
			continue
		}
		if st, ok := readStat(pid); ok && (pid == p.postmaster || st.ppid == p.postmaster) {
			ticks += st.ticks
		}
	}
	return float64(ticks) / 100 // USER_HZ
}

// procStat is what pgProbe reads of /proc/PID/stat.
type procStat struct {
	comm  string
	ppid  int
	ticks int64 // utime + stime
}

// readStat reads /proc/PID/stat.
func readStat(pid int) (procStat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, false
	}
	// pid (comm) state ppid ... utime(14) stime(15): comm may hold spaces,
	// so fields count from the last ')'.
	s := string(b)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return procStat{}, false
	}
	f := strings.Fields(s[end+1:])
	if len(f) < 13 {
		return procStat{}, false
	}
	ppid, _ := strconv.Atoi(f[1])
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return procStat{comm: s[open+1 : end], ppid: ppid, ticks: u + st}, true
}

// loopbackHost reports whether a store URL's host is this machine's
// loopback (or a Unix socket directory).
func loopbackHost(store string) bool {
	u, err := url.Parse(store)
	if err != nil {
		return false
	}
	h := u.Hostname()
	if h == "" || h == "localhost" || strings.HasPrefix(h, "/") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}
