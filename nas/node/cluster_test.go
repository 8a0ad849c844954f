package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/internal/redistest"
	"github.com/chronoscron/chronos/nas"
	"github.com/chronoscron/chronos/nas/node"
	"github.com/chronoscron/chronos/relay"
	relayredis "github.com/chronoscron/chronos/relay/redis"
)

// fireSink is an agent that records the schedule id of every fire it gets.
type fireSink struct {
	mu   sync.Mutex
	seen map[string]int
}

func (f *fireSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var fire contract.FireRequest
	body, _ := io.ReadAll(r.Body)
	if _, ok := contract.BearerToken(r.Header.Get("Authorization")); !ok || json.Unmarshal(body, &fire) != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.seen[fire.ScheduleID]++
	f.mu.Unlock()
	w.WriteHeader(http.StatusAccepted)
}

// missing returns the schedule ids of want not delivered yet, and how many
// deliveries beyond the first there were.
func (f *fireSink) missing(want []string) (missing []string, extra int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, id := range want {
		if f.seen[id] == 0 {
			missing = append(missing, id)
		}
	}
	for _, n := range f.seen {
		extra += n - 1
	}
	return missing, extra
}

// clusterShards is the least shard count, from 3 up, whose shards' slots
// are spread over every node of c, so that fires reach every node.
func clusterShards(t *testing.T, c *redistest.Cluster, prefix string) (int, []int) {
	t.Helper()
	ctx := context.Background()
	for n := 3; n <= 64; n++ {
		slots := make([]int, n)
		owners := map[*redistest.Server]bool{}
		for s := range n {
			slot, err := c.Slot(ctx, "{chronos:"+prefix+":"+strconv.Itoa(s)+"}")
			if err != nil {
				t.Fatal(err)
			}
			owner, err := c.Owner(ctx, slot)
			if err != nil {
				t.Fatal(err)
			}
			slots[s], owners[owner] = slot, true
		}
		if len(owners) == len(c.Nodes) {
			return n, slots
		}
	}
	t.Fatal("no shard count up to 64 spreads over every node")
	return 0, nil
}

// TestClusterDeliversThroughASlotMigration runs NAS (dispatchers in
// process) and a relay process (dispatchers on the signed relay route) on a
// three-node Redis Cluster, with the store's shards spread over every node;
// while fires fall due, two shards' slots move to another node, keys and
// all. Every fire reaches the agent, and the store ends empty: nothing is
// lost, nothing dead-lettered.
func TestClusterDeliversThroughASlotMigration(t *testing.T) {
	t.Parallel()
	cluster := redistest.StartCluster(t, 3)
	const prefix = "cluster-test"
	shards, slots := clusterShards(t, cluster, prefix)
	store := cluster.URL() + "&prefix=" + prefix + "&shards=" + strconv.Itoa(shards)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))

	sink := &fireSink{seen: map[string]int{}}
	agent := httptest.NewServer(sink)
	t.Cleanup(agent.Close)

	one := 1
	public, internal := listen(t), listen(t)
	cfg := nas.Config{
		Listen: public.Addr().String(), PublicURL: "http://" + public.Addr().String(), Store: store,
		Relay:                 nas.RelayConfig{Secrets: []string{contract.FormatWebhookSecret([]byte("0123456789abcdef0123456789abcdef"))}, Dispatchers: &one},
		AllowPrivateCallbacks: true,
	}
	agents, err := nas.NewStaticAgents([]nas.AgentEntry{{AgentID: "a", InstanceID: "i", TokenSHA256: nas.TokenSHA256("tok")}})
	if err != nil {
		t.Fatal(err)
	}
	relayRoute := &countingListener{Listener: internal}
	n, err := node.New(ctx, node.Options{Config: cfg, Logger: log, Listener: public, RelayListener: relayRoute, Verifier: agents})
	if err != nil {
		t.Fatal(err)
	}
	var parts sync.WaitGroup
	parts.Go(func() {
		if err := n.Run(ctx); err != nil {
			t.Errorf("nas: %v", err)
		}
	})
	relayCfg := cfg
	relayCfg.Relay.NASURL = n.RelayURL()
	parts.Go(func() {
		if err := node.RunRelay(ctx, node.RelayOptions{Config: relayCfg, Logger: log}); err != nil {
			t.Errorf("relay: %v", err)
		}
	})
	defer parts.Wait()
	defer cancel()

	engine, err := relayredis.Open(ctx, store, relayredis.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer engine.Close()

	// 600 fires of 60 agents, due over 3 seconds from 1 second on.
	const fires, agentsN = 600, 60
	start := time.Now().Add(time.Second)
	want := make([]string, 0, fires)
	for i := range fires {
		agentID := "agent-" + strconv.Itoa(i%agentsN)
		res, err := engine.Arm(ctx, relay.ArmRequest{
			AgentID: agentID, InstanceID: "inst-" + agentID, JobID: "job-" + strconv.Itoa(i),
			FireAt:      start.Add(time.Duration(i) * 3 * time.Second / fires),
			CallbackURL: agent.URL, ScheduleID: fmt.Sprintf("sch-%d", i),
		})
		if err != nil {
			t.Fatalf("arm %d: %v", i, err)
		}
		want = append(want, res.OneShot.ScheduleID)
	}

	// Every shard, so every node, has fires.
	for s := range shards {
		due, err := engine.Client().ZCard(ctx, "{chronos:"+prefix+":"+strconv.Itoa(s)+"}:due").Result()
		if err != nil || due == 0 {
			t.Fatalf("shard %d has %d fires armed (%v); the test wants every shard used", s, due, err)
		}
	}

	// Half a second into the fires, move two shards' slots to the next node.
	time.Sleep(time.Until(start.Add(500 * time.Millisecond)))
	for _, s := range []int{0, shards - 1} {
		owner, err := cluster.Owner(ctx, slots[s])
		if err != nil {
			t.Fatal(err)
		}
		to := cluster.Nodes[0]
		for i, node := range cluster.Nodes {
			if node == owner {
				to = cluster.Nodes[(i+1)%len(cluster.Nodes)]
			}
		}
		moved, err := cluster.MigrateSlot(ctx, slots[s], to, 3, 50*time.Millisecond)
		if err != nil {
			t.Fatalf("migrate shard %d (slot %d): %v", s, slots[s], err)
		}
		if moved == 0 {
			t.Fatalf("shard %d (slot %d) had no keys to move", s, slots[s])
		}
	}

	deadline := time.Now().Add(30 * time.Second)
	for {
		missing, extra := sink.missing(want)
		if len(missing) == 0 {
			t.Logf("%d fires delivered over %d shards, %d deliveries repeated", fires, shards, extra)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d fires never arrived, e.g. %v", len(missing), fires, missing[:min(5, len(missing))])
		}
		time.Sleep(20 * time.Millisecond)
	}
	for {
		st, err := engine.Stats(ctx)
		if err == nil && st.Armed == 0 && st.DeadLetter == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the store did not empty: %+v %v", st, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if relayRoute.accepted.Load() == 0 {
		t.Error("the relay process never called NAS's relay route")
	}
}

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	accepted atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepted.Add(1)
	}
	return c, err
}
