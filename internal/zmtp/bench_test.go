package zmtp

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
)

// BenchmarkPubSub measures messages per second from our PUB to our SUB over
// loopback, vLLM-shaped with 1 KiB payloads. The PUB's HWM is large enough
// and the sender keeps at most half of it in flight, so nothing is dropped
// and the figure is end-to-end delivery, not how fast Send can drop.
func BenchmarkPubSub(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pub, err := ListenPub(ctx, loopback, Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer pub.Close()
	sub, err := DialSub(ctx, pub.Endpoint(), Options{}, "kv")
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Close()
	for pub.subscribers("kv") == 0 {
		if err := pub.Send(seqMsg("x", 0, nil)); err != nil {
			b.Fatal(err)
		}
	}
	payload := make([]byte, 1024)
	msgs := make([][][]byte, 1024)
	for i := range msgs {
		msgs[i] = seqMsg("kv-events", uint64(i), payload)
	}
	b.SetBytes(int64(len(payload)))
	b.ResetTimer()
	var received atomic.Int64
	done := make(chan error, 1)
	go func() {
		for range b.N {
			if _, err := sub.Recv(ctx); err != nil {
				done <- err
				return
			}
			received.Add(1)
		}
		done <- nil
	}()
	for i := range b.N {
		for int64(i)-received.Load() > DefaultHWM/2 {
			runtime.Gosched()
		}
		if pub.Send(msgs[i%len(msgs)]) != nil {
			b.Fatal("closed")
		}
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	if d := pub.Stats().Dropped; d > 0 {
		b.Fatalf("%d dropped", d)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}
