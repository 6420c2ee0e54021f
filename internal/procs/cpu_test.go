package procs

import (
	"os"
	"testing"
	"time"
)

func TestCPUReadings(t *testing.T) {
	d, err := ProcessCPU(os.Getpid())
	if err != nil || d < 0 {
		t.Errorf("ProcessCPU(self) = %v, %v", d, err)
	}
	a := ReadCPUTimes()
	for time.Since(a.at) < 50*time.Millisecond { // burn a little CPU
	}
	b := ReadCPUTimes()
	if a.procs <= 0 || a.loadavg == "" || b.ours < a.ours {
		t.Errorf("ReadCPUTimes: %+v then %+v", a, b)
	}
	m := MachineShareBetween(a, b, 2)
	if m.Ours < 0 || m.Others < 0 || m.LoadAvgStart == "" {
		t.Errorf("MachineShareBetween = %+v", m)
	}
	if got := MachineShareBetween(CPUTimes{}, CPUTimes{}, 2); got.Ours != 0 || got.Others != 0 {
		t.Errorf("MachineShareBetween(zeros) = %+v", got)
	}
}
