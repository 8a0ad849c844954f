package ledger

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkAppendParallel measures in-process appends made at once (each
// waits for its line to be durable), as a burst of runs makes them: on a
// ledger nobody follows, and on one followed (ObserveAll) while Follow
// reads the directory every 5 ms (50 times as often as the agent does).
func BenchmarkAppendParallel(b *testing.B) {
	for _, followed := range []string{"alone", "followed"} {
		b.Run(followed, func(b *testing.B) {
			l, err := Open(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			if followed == "followed" {
				l.ObserveAll(func(Entry) {})
				go func() {
					defer close(done)
					t := time.NewTicker(5 * time.Millisecond)
					defer t.Stop()
					for ctx.Err() == nil {
						_ = l.Follow(ctx)
						<-t.C
					}
				}()
			} else {
				close(done)
			}
			var n atomic.Int64
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := n.Add(1)
					if err := l.Append(ctx, entry("r", StateRunning, day.Add(time.Duration(i)), uint64(i))); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			cancel()
			<-done
		})
	}
}
