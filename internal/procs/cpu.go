package procs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTicks is the unit of /proc/<pid>/stat CPU times (USER_HZ), 100 on
// every Linux build this runs on.
const clockTicks = 100

// ProcessCPU returns the CPU time (user and system) process pid has used,
// from /proc/<pid>/stat, with a resolution of 10 ms.
func ProcessCPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("read CPU time: %w", err)
	}
	// The command name may hold spaces; the fields after it are fixed.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, fmt.Errorf("read CPU time: malformed /proc/%d/stat", pid)
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("read CPU time: short /proc/%d/stat", pid)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("read CPU time: %w", err)
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}

// CPUTimes is the machine's CPU time by kind and this process's own, its
// reaped children's included, at one moment.
type CPUTimes struct {
	at      time.Time
	procs   time.Duration // every CPU, time in processes: user, nice, system (from /proc/stat)
	irq     time.Duration // every CPU, interrupts: irq and softirq (loopback TCP is mostly softirq)
	steal   time.Duration // every CPU, taken by the hypervisor
	ours    time.Duration // this process and the children it has waited for
	loadavg string
}

// ReadCPUTimes reads /proc/stat, /proc/self/stat and /proc/loadavg; what
// it cannot read stays zero, which MachineShareBetween reports as nothing.
// The CPU the processes alive (children not yet waited for) have used
// counts as ours too.
func ReadCPUTimes(alive ...int) CPUTimes {
	t := CPUTimes{at: time.Now()}
	ticks := func(f []string, i int) time.Duration {
		v, _ := strconv.ParseInt(f[i], 10, 64)
		return time.Duration(v) * time.Second / clockTicks
	}
	if data, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := strings.Cut(string(data), "\n")
		// cpu user nice system idle iowait irq softirq steal ...
		if f := strings.Fields(line); len(f) >= 9 && f[0] == "cpu" {
			t.procs = ticks(f, 1) + ticks(f, 2) + ticks(f, 3)
			t.irq = ticks(f, 6) + ticks(f, 7)
			t.steal = ticks(f, 8)
		}
	}
	if data, err := os.ReadFile("/proc/self/stat"); err == nil {
		if i := bytes.LastIndexByte(data, ')'); i >= 0 {
			// After the name: state ppid ... utime(11) stime cutime cstime.
			if f := strings.Fields(string(data[i+1:])); len(f) >= 15 {
				t.ours = ticks(f, 11) + ticks(f, 12) + ticks(f, 13) + ticks(f, 14)
			}
		}
	}
	if data, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(data)); len(f) >= 3 {
			t.loadavg = strings.Join(f[:3], " ")
		}
	}
	for _, pid := range alive {
		if d, err := ProcessCPU(pid); err == nil {
			t.ours += d
		}
	}
	return t
}

// MachineShare says how busy the machine was during a scenario, and with
// whose work. Shares are of the machine's capacity, every CPU over the
// scenario's wall time: 0.5 is one core of two. They come from 10 ms
// ticks, so they are rough.
type MachineShare struct {
	// LoadAvgStart and LoadAvgEnd are /proc/loadavg's 1, 5 and 15 minute
	// averages when the scenario began and ended.
	LoadAvgStart string `json:"loadavg_start"`
	LoadAvgEnd   string `json:"loadavg_end"`
	// Ours is the CPU the harness, the gateway and the simulators used;
	// Others what every other process on the machine used; Interrupts the
	// kernel's interrupt work, which no process is charged for (most of
	// it is loopback TCP, ours or others'); Steal what the hypervisor took.
	Ours       float64 `json:"ours_cpu_share"`
	Others     float64 `json:"others_cpu_share"`
	Interrupts float64 `json:"interrupts_cpu_share"`
	Steal      float64 `json:"steal_cpu_share"`
}

// MachineShareBetween compares two readings taken before the scenario's
// first child started and after its last child was reaped, on a machine of
// cpus CPUs.
func MachineShareBetween(a, b CPUTimes, cpus int) MachineShare {
	m := MachineShare{LoadAvgStart: a.loadavg, LoadAvgEnd: b.loadavg}
	capacity := b.at.Sub(a.at).Seconds() * float64(cpus)
	if capacity <= 0 || b.procs == 0 {
		return m
	}
	ours := (b.ours - a.ours).Seconds()
	m.Ours = ours / capacity
	m.Others = max(0, (b.procs-a.procs).Seconds()-ours) / capacity
	m.Interrupts = (b.irq - a.irq).Seconds() / capacity
	m.Steal = (b.steal - a.steal).Seconds() / capacity
	return m
}
