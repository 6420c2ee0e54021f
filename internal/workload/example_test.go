package workload_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/workload"
)

func ExampleGenerate() {
	reqs, err := workload.Generate(workload.Spec{
		Workload: workload.W1,
		Model:    "llama-8b",
		Rate:     6,
		Duration: time.Minute,
		Seed:     1,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	hit, err := workload.OracleHitRate(reqs, 16)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%d requests, the first at %v with %d prompt tokens\n", len(reqs), reqs[0].At.Round(time.Millisecond), reqs[0].PromptTokens)
	fmt.Printf("oracle hit rate %.2f\n", hit)
	// Output:
	// 329 requests, the first at 443ms with 8146 prompt tokens
	// oracle hit rate 0.92
}

func BenchmarkGenerate(b *testing.B) {
	for _, w := range []string{workload.W1, workload.W2, workload.W3, workload.W4, workload.W6} {
		b.Run(w, func(b *testing.B) {
			spec := workload.Spec{Workload: w, Model: "m", Rate: 20, Duration: 10 * time.Minute, Seed: 1}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := workload.Generate(spec); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
