package relaybench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/nas"
	"github.com/chronoscron/chronos/nas/node"
	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/cronkey"
)

// rig is a run's moving parts: the store, NAS with its dispatchers, and
// the agent sink.
type rig struct {
	engine      relay.Engine
	storeProbes // nil for the memory store
	cleanup     func()
	sink        *sink
	sinkSrv     *http.Server
	sinkURLs    []string
	running     sync.WaitGroup
	keys        *cronKeys // the cron keys of a direct run, else nil
}

// newRig opens the store and starts NAS (with the run's dispatchers) and
// the sink, all on loopback.
func newRig(ctx context.Context, o Options, log *slog.Logger) (r *rig, err error) {
	r = &rig{}
	if r.engine, r.storeProbes, r.cleanup, err = openStore(ctx, o.Store, log); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			r.close(func() {})
		}
	}()
	if o.Delivery == DeliveryDirect {
		if r.keys, err = newCronKeys(); err != nil {
			return r, err
		}
	}
	nasLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return r, fmt.Errorf("bench relay: listen: %w", err)
	}
	n, cfg, err := startNAS(ctx, o, r.engine, nasLn, r.keys, log)
	if err != nil {
		return r, err
	}
	r.running.Go(func() { _ = n.Run(ctx) })
	if o.Dispatch == DispatchRelay {
		if err := r.startRelay(ctx, o, cfg, log); err != nil {
			return r, err
		}
	}
	jwks, err := fetchJWKS(ctx, n.URL()+contract.PathJWKS)
	if err != nil {
		return r, err
	}
	if err := r.startSink(n.URL(), jwks, o.N+o.Neighbours.fires(), r.keys, log); err != nil {
		return r, err
	}
	if o.Neighbours.fires() > 0 {
		r.sink.nb = &neighbourhood{n: o.Neighbours, lags: map[string][]time.Duration{}}
	}
	return r, nil
}

// startNAS builds NAS on ln around engine, with the run's dispatchers
// (none when they run as a relay process's) and, for a direct run, the cron
// keys' encryption key. It returns NAS's config.
func startNAS(ctx context.Context, o Options, engine relay.Engine, ln net.Listener, keys *cronKeys, log *slog.Logger) (*node.Node, nas.Config, error) {
	url := "http://" + ln.Addr().String()
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	dispatchers := o.Dispatchers
	if o.Dispatch == DispatchRelay {
		dispatchers = 0
	}
	cfg := nas.Config{
		Listen: ln.Addr().String(), PublicURL: url, Store: "memory", SigningAlg: o.Alg,
		Relay:                 nas.RelayConfig{Secrets: []string{contract.FormatWebhookSecret(secret)}, NASURL: url, Dispatchers: &dispatchers},
		AllowPrivateCallbacks: true, LogLevel: "error",
	}
	if keys != nil {
		cfg.Relay.CronKeyEncryptionKeyFile = keys.file
	}
	n, err := node.New(ctx, node.Options{Config: cfg, Logger: log, Engine: engine, Listener: ln, Dispatch: node.DispatchOptions{
		Concurrency: o.Concurrency, DrainTimeout: 5 * time.Second,
	}})
	if err != nil {
		_ = ln.Close()
		return nil, cfg, fmt.Errorf("bench relay: nas: %w", err)
	}
	return n, cfg, nil
}

// startRelay runs the run's dispatchers as a chronos relay process runs
// them (node.NewRelayDeliverer): mediated fires POSTed, signed, to NAS's
// relay route, direct fires straight to the sink.
func (r *rig) startRelay(ctx context.Context, o Options, cfg nas.Config, log *slog.Logger) error {
	cfg = cfg.WithDefaults()
	var sealer *cronkey.Sealer
	if r.keys != nil {
		sealer = r.keys.sealer
	}
	d, closeDeliverer, err := node.NewRelayDeliverer(cfg, sealer, r.engine, log, o.Concurrency)
	if err != nil {
		return fmt.Errorf("bench relay: %w", err)
	}
	var dispatchers sync.WaitGroup
	for range o.Dispatchers {
		dc := cfg.Relay.Dispatch()
		dc.Logger, dc.Concurrency, dc.DrainTimeout = log, o.Concurrency, 5*time.Second
		disp := relay.NewDispatcher(r.engine, d, dc)
		dispatchers.Go(func() { _ = disp.Run(ctx) })
	}
	r.running.Go(func() {
		dispatchers.Wait()
		closeDeliverer()
	})
	return nil
}

// startSink serves the agent sink on every loopback address it can listen on.
func (r *rig) startSink(issuer string, jwks []byte, want int, keys *cronKeys, log *slog.Logger) error {
	lns, err := listenSink()
	if err != nil {
		return err
	}
	r.sink = newSink(issuer, jwks, want, log)
	r.sink.keys = keys
	r.sinkSrv = &http.Server{Handler: r.sink, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 10 * time.Second, IdleTimeout: time.Minute, MaxHeaderBytes: 16 << 10}
	for _, ln := range lns {
		r.running.Go(func() { _ = r.sinkSrv.Serve(ln) })
		r.sinkURLs = append(r.sinkURLs, "http://"+ln.Addr().String())
	}
	return nil
}

// close stops NAS (through cancel) and the sink, waits for them and removes
// what the run wrote to the store.
func (r *rig) close(cancel context.CancelFunc) {
	cancel()
	if r.sinkSrv != nil {
		_ = r.sinkSrv.Close()
	}
	r.running.Wait()
	if r.sink != nil {
		r.sink.close()
	}
	r.cleanup()
	if r.keys != nil {
		r.keys.close()
	}
}

// sinkHosts is how many loopback addresses the agent sink listens on: agents
// are spread over them as they would be over hosts, so that NAS's per-host
// connection pool sees several hosts.
const sinkHosts = 16

// listenSink listens on 127.0.0.1 and, where the system routes them to the
// loopback interface (Linux), on 127.0.0.2 to 127.0.0.16.
func listenSink() ([]net.Listener, error) {
	var lns []net.Listener
	for i := 1; i <= sinkHosts; i++ {
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.%d:0", i))
		if err != nil {
			if i == 1 {
				return nil, fmt.Errorf("bench relay: listen: %w", err)
			}
			break
		}
		lns = append(lns, ln)
	}
	return lns, nil
}

// armAll arms the run's one-shots with ArmWorkers parallel callers.
// With keys (a direct run), every job is armed for direct delivery under a
// fresh cron key.
func armAll(ctx context.Context, engine relay.Engine, o Options, first time.Time, sinkURLs []string, keys *cronKeys) error {
	var runID [6]byte
	_, _ = rand.Read(runID[:])
	run := hex.EncodeToString(runID[:])
	var next atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, o.ArmWorkers)
	for range o.ArmWorkers {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < o.N; i = int(next.Add(1) - 1) {
				at := first
				if o.Rate > 0 {
					at = first.Add(time.Duration(float64(i) / o.Rate * float64(time.Second)))
				}
				agent := fmt.Sprintf("agent-%04d", i%o.Agents)
				req := relay.ArmRequest{
					AgentID: agent, InstanceID: instanceOf(agent), JobID: fmt.Sprintf("job-%07d", i),
					FireAt: at, CallbackURL: sinkURLs[(i%o.Agents)%len(sinkURLs)] + "/agents/" + agent,
					ScheduleID: fmt.Sprintf("sch_%s%020d", run, i),
				}
				err := armDirect(keys, &req)
				if err == nil {
					_, err = engine.Arm(ctx, req)
				}
				if err != nil {
					errc <- fmt.Errorf("bench relay: arm: %w", err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		return err
	}
	for _, nb := range o.Neighbours.agents() {
		for i := range nb.fires {
			req := relay.ArmRequest{
				AgentID: nb.name, InstanceID: instanceOf(nb.name), JobID: fmt.Sprintf("job-%07d", i),
				FireAt: first, CallbackURL: sinkURLs[0] + "/agents/" + nb.name,
				ScheduleID: fmt.Sprintf("sch_%s%s%07d", run, nb.name, i),
			}
			err := armDirect(keys, &req)
			if err == nil {
				_, err = engine.Arm(ctx, req)
			}
			if err != nil {
				return fmt.Errorf("bench relay: arm: %w", err)
			}
		}
	}
	return nil
}

// armDirect arms req for direct delivery under a fresh cron key when keys
// is set (a direct run).
func armDirect(keys *cronKeys, req *relay.ArmRequest) error {
	if keys == nil {
		return nil
	}
	k, err := keys.mint(req.AgentID, req.JobID, time.Now())
	if err != nil {
		return err
	}
	req.Direct = k
	return nil
}

// fetchJWKS reads NAS's key set, as an agent would.
func fetchJWKS(ctx context.Context, url string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("bench relay: jwks: %w", err)
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return nil, fmt.Errorf("bench relay: jwks: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("bench relay: jwks: status %d", resp.StatusCode)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 256<<10))
	if err != nil {
		return nil, fmt.Errorf("bench relay: jwks: %w", err)
	}
	return b, nil
}
