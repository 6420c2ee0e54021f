package procs

import (
	"errors"
	"os"
	"testing"
)

func TestParseStatusKB(t *testing.T) {
	status := "Name:\tinferrail-sim\nVmPeak:\t  812345 kB\nVmRSS:\t   17320 kB\nThreads:\t8\n"
	got, err := parseStatusKB([]byte(status), "VmRSS")
	if err != nil || got != 17320 {
		t.Errorf("parseStatusKB(VmRSS) = %d, %v, want 17320", got, err)
	}
	if _, err := parseStatusKB([]byte(status), "VmSwap"); !errors.Is(err, errNoField) {
		t.Errorf("parseStatusKB(VmSwap) error = %v, want errNoField", err)
	}
	if _, err := parseStatusKB([]byte(status), "Threads"); err == nil {
		t.Error("parseStatusKB(Threads) accepted a value without kB")
	}
	rss, err := ResidentBytes(os.Getpid())
	if err != nil || rss <= 0 {
		t.Errorf("ResidentBytes(self) = %d, %v", rss, err)
	}
}
