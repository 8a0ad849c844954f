package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/ledger"
)

// BenchmarkFanout1000 runs a 1,000-item fanout at concurrency 16 whose
// children run `true`, and reports the wall time, the ledger bytes written
// and the peak Go heap seen while it ran (sampled every 10 ms).
func BenchmarkFanout1000(b *testing.B) {
	const n = 1000
	items := make([]string, n)
	for i := range items {
		items[i] = fmt.Sprintf("target-%04d.example.com", i)
	}
	for range b.N {
		b.StopTimer()
		bb := setup(b)
		bb.add(b, JobSpec{ID: "scale", Schedule: "@yearly", Payload: shell("true"), JobKind: job.JobKindFanout,
			Fanout: &job.Fanout{InputsFrom: writeItems(b, items), Concurrency: 16}})
		var (
			peak uint64
			wg   sync.WaitGroup
		)
		stop := make(chan struct{})
		wg.Go(func() {
			var ms runtime.MemStats
			t := time.NewTicker(10 * time.Millisecond)
			defer t.Stop()
			for {
				runtime.ReadMemStats(&ms)
				peak = max(peak, ms.HeapAlloc)
				select {
				case <-stop:
					return
				case <-t.C:
				}
			}
		})
		b.StartTimer()
		start := time.Now()
		p := bb.runNow(b, "scale")
		took := time.Since(start)
		b.StopTimer()
		close(stop)
		wg.Wait()
		if p.State != ledger.StateSucceeded {
			b.Fatalf("parent %s (%s)", p.State, p.Reason)
		}
		var bytes int64
		days, _ := filepath.Glob(filepath.Join(bb.home, "runs", "*.jsonl"))
		for _, d := range days {
			if fi, err := os.Stat(d); err == nil {
				bytes += fi.Size()
			}
		}
		b.ReportMetric(took.Seconds(), "wall-s")
		b.ReportMetric(float64(bytes), "ledger-bytes")
		b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
	}
}
