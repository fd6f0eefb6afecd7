package processor_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/go-logr/logr/funcr"

	"github.com/boltinformer/boltinformer/processor"
)

// quiet drops log lines; the zero klog.Logger would mean the default.
var quiet = funcr.New(func(prefix, args string) {}, funcr.Options{})

type counter struct{ n atomic.Int64 }

func (c *counter) OnAdd(interface{}, bool)           { c.n.Add(1) }
func (c *counter) OnUpdate(interface{}, interface{}) { c.n.Add(1) }
func (c *counter) OnDelete(interface{})              { c.n.Add(1) }

// BenchmarkDistribute measures notifications per second from Distribute to
// every handler (end to end: the timer stops once all are handled).
func BenchmarkDistribute(b *testing.B) {
	for _, listeners := range []int{1, 10} {
		b.Run(fmt.Sprintf("listeners=%d", listeners), func(b *testing.B) {
			p := processor.New(&processor.Options{Logger: quiet})
			counters := make([]*counter, listeners)
			for i := range counters {
				counters[i] = &counter{}
				p.AddListener(counters[i], processor.ListenerOptions{})
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() {
				defer close(done)
				p.Run(ctx)
			}()
			var n processor.Notification = processor.UpdateNotification{Old: "a", New: "b"}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				p.Distribute(n, false)
			}
			for _, c := range counters {
				for c.n.Load() < int64(b.N) {
					runtime.Gosched()
				}
			}
			b.StopTimer()
			cancel()
			<-done
		})
	}
}
