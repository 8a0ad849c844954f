package redistest

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// clusterTimeout bounds how long a new cluster may take to agree on its
// slots.
const clusterTimeout = 30 * time.Second

// Cluster is a Redis Cluster of local redis-server nodes owned by a test,
// every node a master (no replicas).
type Cluster struct {
	Nodes []*Server
}

// StartCluster starts n (at least 3) redis-server nodes in cluster mode,
// joins them with `redis-cli --cluster create`, which spreads the 16384
// slots evenly over them, and waits until every node reports the cluster
// ok. The nodes stop at the end of the test.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	if n < 3 {
		t.Fatalf("redistest: a cluster needs at least 3 masters, not %d", n)
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatal("redis-cli not found: it ships with redis-server (apt-get install redis-server)")
	}
	c := &Cluster{}
	args := []string{"--cluster", "create"}
	for range n {
		s := Start(t, Options{Cluster: true})
		c.Nodes = append(c.Nodes, s)
		args = append(args, s.Addr())
	}
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	if err := c.waitAgreed(ctx); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	return c
}

// URL is the redis+cluster:// URL of the cluster, every node a seed.
func (c *Cluster) URL() string {
	u := "redis+cluster://" + c.Nodes[0].Addr()
	for i, s := range c.Nodes[1:] {
		sep := "&"
		if i == 0 {
			sep = "?"
		}
		u += sep + "addr=" + s.Addr()
	}
	return u
}

// nodeClient returns a plain client of one node, for cluster administration.
func nodeClient(s *Server) *goredis.Client {
	return goredis.NewClient(&goredis.Options{Addr: s.Addr(), MaxRetries: -1})
}

// waitAgreed waits until every node says the cluster is ok and sees every
// slot owned by the same node as the first node sees it.
func (c *Cluster) waitAgreed(ctx context.Context) error {
	for {
		ok, why := c.agreed(ctx)
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster not agreed: %s", why)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// agreed reports whether the nodes agree, and if not, why.
func (c *Cluster) agreed(ctx context.Context) (bool, string) {
	var want string
	for i, s := range c.Nodes {
		cl := nodeClient(s)
		info, err := cl.ClusterInfo(ctx).Result()
		if err != nil {
			_ = cl.Close()
			return false, err.Error()
		}
		if !strings.Contains(info, "cluster_state:ok") {
			_ = cl.Close()
			return false, s.Addr() + " is not ok"
		}
		ranges, err := slotOwners(ctx, cl)
		_ = cl.Close()
		if err != nil {
			return false, err.Error()
		}
		var b strings.Builder
		for _, r := range ranges {
			fmt.Fprintf(&b, "%d-%d:%s ", r.start, r.end, r.addr)
		}
		// The ranges come in no promised order: compare them as sets.
		got := sortedFields(b.String())
		if i == 0 {
			want = got
		} else if got != want {
			return false, s.Addr() + " sees other slot owners"
		}
	}
	return true, ""
}

// sortedFields returns the space-separated fields of s, sorted.
func sortedFields(s string) string {
	f := strings.Fields(s)
	slices.Sort(f)
	return strings.Join(f, " ")
}

// slotRange is a range of slots and the address of the master serving it.
type slotRange struct {
	start, end int
	addr       string
}

// slotOwners reads which master serves which slots, as the node of cl
// sees it (CLUSTER SHARDS).
func slotOwners(ctx context.Context, cl *goredis.Client) ([]slotRange, error) {
	shards, err := cl.ClusterShards(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("cluster shards: %w", err)
	}
	var out []slotRange
	for _, sh := range shards {
		for _, n := range sh.Nodes {
			if n.Role != "master" {
				continue
			}
			addr := net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10))
			for _, r := range sh.Slots {
				out = append(out, slotRange{start: int(r.Start), end: int(r.End), addr: addr})
			}
		}
	}
	return out, nil
}

// Owner returns the node that serves slot.
func (c *Cluster) Owner(ctx context.Context, slot int) (*Server, error) {
	cl := nodeClient(c.Nodes[0])
	defer cl.Close()
	ranges, err := slotOwners(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	for _, r := range ranges {
		if r.start <= slot && slot <= r.end {
			for _, s := range c.Nodes {
				if s.Addr() == r.addr {
					return s, nil
				}
			}
			return nil, fmt.Errorf("redistest: slot %d is served by %s, not a node of this cluster", slot, r.addr)
		}
	}
	return nil, fmt.Errorf("redistest: slot %d is not served", slot)
}

// Slot is the cluster slot of key (its hash tag's, if it has one).
func (c *Cluster) Slot(ctx context.Context, key string) (int, error) {
	cl := nodeClient(c.Nodes[0])
	defer cl.Close()
	n, err := cl.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		return 0, fmt.Errorf("redistest: cluster keyslot: %w", err)
	}
	return int(n), nil
}

// MigrateSlot moves slot, keys and all, to node to while clients keep
// using it, the way a resharding does: the slot is marked importing on the
// target and migrating on its owner, its keys are moved batch by batch
// (step keys at a time, pausing between batches so that clients meet the
// slot half moved and follow ASK redirections), and then every node is told
// the target owns it. It returns how many keys were moved.
func (c *Cluster) MigrateSlot(ctx context.Context, slot int, to *Server, step int, pause time.Duration) (int, error) {
	from, err := c.Owner(ctx, slot)
	if err != nil {
		return 0, err
	}
	if from == to {
		return 0, fmt.Errorf("redistest: slot %d is already on %s", slot, to.Addr())
	}
	src, dst := nodeClient(from), nodeClient(to)
	defer src.Close()
	defer dst.Close()
	srcID, err := src.ClusterMyID(ctx).Result()
	if err != nil {
		return 0, fmt.Errorf("redistest: migrate: %w", err)
	}
	dstID, err := dst.ClusterMyID(ctx).Result()
	if err != nil {
		return 0, fmt.Errorf("redistest: migrate: %w", err)
	}
	sl := strconv.Itoa(slot)
	if err := dst.Do(ctx, "CLUSTER", "SETSLOT", sl, "IMPORTING", srcID).Err(); err != nil {
		return 0, fmt.Errorf("redistest: migrate: importing: %w", err)
	}
	if err := src.Do(ctx, "CLUSTER", "SETSLOT", sl, "MIGRATING", dstID).Err(); err != nil {
		return 0, fmt.Errorf("redistest: migrate: migrating: %w", err)
	}
	host, port, _ := strings.Cut(to.Addr(), ":")
	moved := 0
	for {
		keys, err := src.ClusterGetKeysInSlot(ctx, slot, step).Result()
		if err != nil {
			return moved, fmt.Errorf("redistest: migrate: keys in slot: %w", err)
		}
		if len(keys) == 0 {
			break
		}
		args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		if err := src.Do(ctx, args...).Err(); err != nil {
			return moved, fmt.Errorf("redistest: migrate: %w", err)
		}
		moved += len(keys)
		select {
		case <-ctx.Done():
			return moved, ctx.Err()
		case <-time.After(pause):
		}
	}
	// The target first, then the old owner, then everyone else.
	for _, s := range append([]*Server{to, from}, c.Nodes...) {
		cl := nodeClient(s)
		err := cl.Do(ctx, "CLUSTER", "SETSLOT", sl, "NODE", dstID).Err()
		_ = cl.Close()
		if err != nil {
			return moved, fmt.Errorf("redistest: migrate: node: %w", err)
		}
	}
	return moved, c.waitAgreed(ctx)
}

// StartClusterWithReplicas starts masters redis-server nodes and one
// replica of each in cluster mode, with cluster-node-timeout nodeTimeout
// and cluster-require-full-coverage no (see Options.ClusterPartialCoverage),
// joins them with `redis-cli --cluster create --cluster-replicas 1`, and
// waits until every node reports the cluster ok and every replica is in
// sync with its master. Nodes holds the masters first, then the replicas.
// The nodes stop at the end of the test.
func StartClusterWithReplicas(t testing.TB, masters int, nodeTimeout time.Duration) *Cluster {
	t.Helper()
	if masters < 3 {
		t.Fatalf("redistest: a cluster needs at least 3 masters, not %d", masters)
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatal("redis-cli not found: it ships with redis-server (apt-get install redis-server)")
	}
	c := &Cluster{}
	args := []string{"--cluster", "create"}
	for range 2 * masters {
		s := Start(t, Options{Cluster: true, ClusterNodeTimeout: nodeTimeout, ClusterPartialCoverage: true})
		c.Nodes = append(c.Nodes, s)
		args = append(args, s.Addr())
	}
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redistest: redis-cli --cluster create (3 masters, 3 replicas): %v\n%s", err, out)
	}
	if err := c.waitAgreed(ctx); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	// redis-cli makes the first masters nodes the masters; order them so
	// whatever it chose.
	var ms, rs []*Server
	for _, s := range c.Nodes {
		if role, err := c.role(ctx, s); err != nil {
			t.Fatalf("redistest: %v", err)
		} else if role == "master" {
			ms = append(ms, s)
		} else {
			rs = append(rs, s)
		}
	}
	c.Nodes = append(ms, rs...)
	for _, r := range rs {
		if err := waitSynced(ctx, r); err != nil {
			t.Fatalf("redistest: %v", err)
		}
	}
	return c
}

// role is "master" or "slave", as INFO replication of s says.
func (c *Cluster) role(ctx context.Context, s *Server) (string, error) {
	cl := nodeClient(s)
	defer cl.Close()
	info, err := cl.Info(ctx, "replication").Result()
	if err != nil {
		return "", fmt.Errorf("info replication of %s: %w", s.Addr(), err)
	}
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "role:"); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("info replication of %s: no role", s.Addr())
}

// waitSynced waits until replica r's link to its master is up.
func waitSynced(ctx context.Context, r *Server) error {
	cl := nodeClient(r)
	defer cl.Close()
	for {
		info, err := cl.Info(ctx, "replication").Result()
		if err == nil && strings.Contains(info, "master_link_status:up") {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("replica %s not in sync: %v", r.Addr(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// OwnerNow returns the master that serves slot as the first node that
// answers sees it (a killed node is skipped), or nil when none answers or
// the slot's master is not a node of the cluster.
func (c *Cluster) OwnerNow(ctx context.Context, slot int) *Server {
	for _, s := range c.Nodes {
		cl := nodeClient(s)
		ranges, err := slotOwners(ctx, cl)
		_ = cl.Close()
		if err != nil {
			continue
		}
		for _, r := range ranges {
			if r.start <= slot && slot <= r.end {
				for _, n := range c.Nodes {
					if n.Addr() == r.addr {
						return n
					}
				}
			}
		}
		return nil
	}
	return nil
}

// ReplicaOf returns the replica of master m, or nil.
func (c *Cluster) ReplicaOf(ctx context.Context, m *Server) *Server {
	_, port, _ := strings.Cut(m.Addr(), ":")
	for _, s := range c.Nodes {
		if s == m {
			continue
		}
		cl := nodeClient(s)
		info, err := cl.Info(ctx, "replication").Result()
		_ = cl.Close()
		if err == nil && strings.Contains(info, "role:slave") && strings.Contains(info, "master_port:"+port+"\r") {
			return s
		}
	}
	return nil
}
