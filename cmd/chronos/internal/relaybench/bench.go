// Package relaybench measures the relay end to end on this machine: it arms
// one-shots in a store, delivers them through the dispatchers of an
// in-process NAS (built by nas/node, delivering in process as chronos nas
// does) to an agent sink on loopback that verifies every
// fire token, and reports arm and drain rates, lags and CPU. It is what
// `chronos bench relay` runs.
package relaybench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/nas"
	"github.com/chronoscron/chronos/nas/node"
)

// Options are the settings of one run.
type Options struct {
	Store       string        // "memory" or a redis:// URL (keys go under a fresh prefix, removed after)
	N           int           // fires
	At          time.Duration // first fire_at, after the run starts
	Rate        float64       // fires per second; 0 = all at once
	Duration    time.Duration // with Rate: how long fires keep coming
	Agents      int           // agents the fires are spread over
	Dispatchers int
	Concurrency int           // deliveries in flight per dispatcher
	ArmWorkers  int           // parallel arming calls
	Timeout     time.Duration // give up waiting for deliveries after this
	Alg         string        // fire-token signing algorithm ("": NAS's default)
	Neighbours  Neighbours    // a slow and a waking agent added to a burst
	// Delivery is how fires reach the sink: DeliveryNAS ("" too), NAS
	// mediates and signs each fire with its key (Alg), or DeliveryDirect,
	// every job is armed for direct delivery under its own cron key and the
	// dispatchers sign each fire with it (HS256).
	Delivery string
	// Dispatch is where the dispatchers run: DispatchNAS ("" too), in NAS's
	// process, handing each fire to NAS in process as chronos nas does, or
	// DispatchRelay, as a chronos relay process's, POSTing each mediated
	// fire to NAS's signed relay route (and a direct one to its agent).
	Dispatch string
}

// Where a run's dispatchers run (Options.Dispatch).
const (
	DispatchNAS   = "nas"
	DispatchRelay = "relay"
)

// Delivery modes of a run (Options.Delivery).
const (
	DeliveryNAS    = contract.DeliveryNAS
	DeliveryDirect = contract.DeliveryDirect
)

// Validate checks o and fills what follows from it: with a Rate, N is rate ×
// duration; an unset Timeout allows for the run's length and size.
func (o *Options) Validate() error {
	if o.Rate > 0 {
		if o.Duration <= 0 {
			return errors.New("--duration must be positive with --rate")
		}
		o.N = int(math.Round(o.Rate * o.Duration.Seconds()))
	}
	if o.N < 1 || o.Agents < 1 || o.Dispatchers < 1 || o.Concurrency < 1 || o.ArmWorkers < 1 {
		return errors.New("--n, --agents, --dispatchers, --concurrency and --arm-workers must be at least 1")
	}
	if err := o.Neighbours.validate(); err != nil {
		return err
	}
	if o.Neighbours.fires() > 0 && o.Rate > 0 {
		return errors.New("--slow and --waking go with a burst, not with --rate")
	}
	switch o.Delivery {
	case "":
		o.Delivery = DeliveryNAS
	case DeliveryNAS, DeliveryDirect:
	default:
		return fmt.Errorf("--delivery %q is not %s or %s", o.Delivery, DeliveryNAS, DeliveryDirect)
	}
	switch o.Dispatch {
	case "":
		o.Dispatch = DispatchNAS
	case DispatchNAS, DispatchRelay:
	default:
		return fmt.Errorf("--dispatch %q is not %s or %s", o.Dispatch, DispatchNAS, DispatchRelay)
	}
	switch o.Alg {
	case "":
		o.Alg = nas.DefaultSigningAlg
	case nas.AlgES256, nas.AlgEdDSA, nas.AlgRS256:
	default:
		return fmt.Errorf("--alg %q is not ES256, EdDSA or RS256", o.Alg)
	}
	if o.Timeout == 0 {
		o.Timeout = o.At + o.Duration + time.Minute + time.Duration(o.N/1000)*time.Second +
			o.Neighbours.WakingFor + time.Duration(o.Neighbours.Slow)*o.Neighbours.SlowAnswer/4
	}
	return nil
}

// Result is what a run measured. Durations are in milliseconds.
type Result struct {
	Store         string  `json:"store"`
	Delivery      string  `json:"delivery"`
	Dispatch      string  `json:"dispatch"`
	SigningAlg    string  `json:"signing_alg"`
	Fires         int     `json:"fires"`
	Mode          string  `json:"mode"`
	Dispatchers   int     `json:"dispatchers"`
	Concurrency   int     `json:"concurrency"`
	Agents        int     `json:"agents"`
	ArmSeconds    float64 `json:"arm_seconds"`
	ArmRate       float64 `json:"arm_rate_per_s"`
	ArmedLate     bool    `json:"armed_after_first_fire_at"`
	DrainSeconds  float64 `json:"drain_seconds"`
	DrainRate     float64 `json:"drain_rate_per_s"`
	LagP50Ms      float64 `json:"lag_p50_ms"`
	LagP99Ms      float64 `json:"lag_p99_ms"`
	LagMaxMs      float64 `json:"lag_max_ms"`
	BytesPerArmed float64 `json:"redis_bytes_per_armed,omitempty"`
	// PostgresBytesPerArmed is the growth of the run's schema on disk
	// (tables, indexes, TOAST) per one-shot armed.
	PostgresBytesPerArmed float64 `json:"postgres_bytes_per_armed,omitempty"`
	// PostgresCPUFireUs is the CPU of the PostgreSQL server's processes per
	// fire, when the server runs on this machine.
	PostgresCPUFireUs float64 `json:"postgres_cpu_per_fire_us,omitempty"`
	CPUPerFireUs      float64 `json:"cpu_per_fire_us"`
	// CPUSeconds is this process's CPU time (user and system) from the end
	// of arming until the last fire arrived: NAS, the dispatchers and the
	// agent sink's verification alike.
	CPUSeconds float64 `json:"cpu_seconds"`
	// FiresPerCPUSecond is the fires delivered per CPU second of this
	// process.
	FiresPerCPUSecond float64 `json:"fires_per_cpu_second"`
	RedisCPUFireUs    float64 `json:"redis_cpu_per_fire_us,omitempty"`
	Delivered         int     `json:"delivered"`
	Verified          int64   `json:"verified"`
	Failed            int64   `json:"failed"`
	Duplicates        int64   `json:"duplicates"`
	Lost              int     `json:"lost"`
	LeftInStore       int64   `json:"left_in_store"`
	// Neighbours, in a run with a slow or waking agent, holds the lags of
	// the burst's own agents apart from theirs.
	Neighbours *NeighbourResult `json:"neighbours,omitempty"`
}

// Run performs one run of validated options. A non-nil result comes back
// whenever the delivery phase ran, even if it then failed.
func Run(ctx context.Context, o Options, log *slog.Logger) (*Result, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r, err := newRig(ctx, o, log)
	if err != nil {
		return nil, err
	}
	defer r.close(cancel)
	alg := o.Alg
	if o.Delivery == DeliveryDirect {
		alg = contract.DirectTokenAlg
	}
	res := &Result{Store: node.StoreKind(o.Store), Delivery: o.Delivery, Dispatch: o.Dispatch, SigningAlg: alg, Fires: o.N, Mode: "burst", Dispatchers: o.Dispatchers,
		Concurrency: o.Concurrency, Agents: o.Agents}
	if o.Rate > 0 {
		res.Mode = fmt.Sprintf("rate %.0f/s for %s", o.Rate, o.Duration)
	}
	first, armed, err := r.arm(ctx, o, res)
	if err != nil {
		return nil, err
	}
	waitErr := r.measure(ctx, o, res, first, armed)
	r.settle(ctx, res, waitErr)
	if waitErr != nil {
		return res, fmt.Errorf("bench relay: %w (%d of %d within %s)", waitErr, res.Delivered, o.N, o.Timeout)
	}
	return res, nil
}

// arm arms the run's one-shots and records how fast.
func (r *rig) arm(ctx context.Context, o Options, res *Result) (first, armed time.Time, err error) {
	var memBefore int64
	if r.redis != nil {
		// Keys unlinked by an earlier run are freed in the background: wait
		// for that, or its frees would be counted against this run's arms.
		waitLazyFree(ctx, r.redis, 30*time.Second)
		memBefore, _ = redisInfoInt(ctx, r.redis, "memory", "used_memory")
	}
	var pgBefore int64
	if r.pg != nil {
		pgBefore, _ = r.pg.bytes(ctx)
	}
	start := time.Now()
	first = start.Add(o.At)
	if nb := r.sink.nb; nb != nil {
		nb.startAt(first)
	}
	if err := armAll(ctx, r.engine, o, first, r.sinkURLs, r.keys); err != nil {
		return first, armed, err
	}
	armed = time.Now()
	res.ArmSeconds = armed.Sub(start).Seconds()
	res.ArmRate = float64(o.N) / res.ArmSeconds
	res.ArmedLate = armed.After(first)
	if r.redis != nil {
		if after, err := redisInfoInt(ctx, r.redis, "memory", "used_memory"); err == nil {
			res.BytesPerArmed = float64(after-memBefore) / float64(o.N)
		}
	}
	if r.pg != nil {
		if after, err := r.pg.bytes(ctx); err == nil {
			res.PostgresBytesPerArmed = float64(after-pgBefore) / float64(o.N)
		}
		if err := r.pg.analyze(ctx); err != nil {
			return first, armed, fmt.Errorf("bench relay: analyze the run's tables: %w", err)
		}
	}
	return first, armed, nil
}

// measure waits for the deliveries, from the end of arming until the last
// fire arrived, and records lags, rates and CPU.
func (r *rig) measure(ctx context.Context, o Options, res *Result, first, armed time.Time) error {
	cpu0 := processCPU()
	var rcpu0, pcpu0 float64
	if r.redis != nil {
		rcpu0 = redisCPU(ctx, r.redis)
	}
	if r.pg != nil {
		pcpu0 = r.pg.cpu()
	}
	wctx, wcancel := context.WithTimeout(ctx, o.Timeout)
	waitErr := r.sink.wait(wctx)
	wcancel()
	cpu := processCPU() - cpu0
	if r.redis != nil {
		res.RedisCPUFireUs = (redisCPU(ctx, r.redis) - rcpu0) * 1e6 / float64(o.N)
	}
	if r.pg != nil {
		res.PostgresCPUFireUs = (r.pg.cpu() - pcpu0) * 1e6 / float64(o.N)
	}
	lags, last := r.sink.results()
	if nb := r.sink.nb; nb != nil {
		res.Neighbours = nb.result(r.sink.othersLags())
	}
	res.Delivered = len(lags)
	res.Lost = o.N + o.Neighbours.fires() - len(lags)
	res.Verified = r.sink.verified.Load()
	res.Failed = r.sink.failed.Load()
	res.Duplicates = r.sink.duplicates.Load()
	res.CPUPerFireUs = cpu.Seconds() * 1e6 / float64(max(len(lags), 1))
	res.CPUSeconds = cpu.Seconds()
	if cpu > 0 {
		res.FiresPerCPUSecond = float64(len(lags)) / cpu.Seconds()
	}
	if len(lags) > 0 {
		slices.Sort(lags)
		res.LagP50Ms = msOf(percentile(lags, 0.50))
		res.LagP99Ms = msOf(percentile(lags, 0.99))
		res.LagMaxMs = msOf(lags[len(lags)-1])
		res.DrainSeconds = last.Sub(later(first, armed)).Seconds()
		if res.DrainSeconds > 0 {
			res.DrainRate = float64(len(lags)) / res.DrainSeconds
		}
	}
	return waitErr
}

// settle waits a little for the acks of delivered fires and counts what is
// left in the store.
func (r *rig) settle(ctx context.Context, res *Result, waitErr error) {
	settle, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		st, err := r.engine.Stats(settle)
		if err == nil {
			res.LeftInStore = st.Armed
		}
		if err != nil || st.Armed == 0 || settle.Err() != nil || waitErr != nil {
			return
		}
		select {
		case <-settle.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// ParseOffset reads "+2s" or "2s".
func ParseOffset(s string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimPrefix(s, "+"))
	if err != nil {
		return 0, err
	}
	if d < 0 {
		return 0, errors.New("must not be negative")
	}
	return d, nil
}

// ParseRate reads "1000/s", "60000/m" or "1000".
func ParseRate(s string) (float64, error) {
	num, unit, _ := strings.Cut(s, "/")
	r, err := strconv.ParseFloat(num, 64)
	if err != nil || r <= 0 || math.IsInf(r, 0) {
		return 0, fmt.Errorf("%q is not a positive rate", s)
	}
	switch unit {
	case "", "s":
		return r, nil
	case "m":
		return r / 60, nil
	default:
		return 0, fmt.Errorf("%q: unit must be /s or /m", s)
	}
}

// percentile returns the p-quantile of sorted durations (nearest rank).
func percentile(sorted []time.Duration, p float64) time.Duration {
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func msOf(d time.Duration) float64 { return math.Round(float64(d)/1e4) / 100 }
