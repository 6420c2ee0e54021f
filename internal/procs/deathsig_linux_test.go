package procs_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/procs"
	"github.com/inferrail/inferrail/internal/procs/procstest"
)

// orphanParentVar makes TestChildDiesWithHarness the harness itself: it
// starts a simulator, prints its pid and waits to be killed.
const orphanParentVar = "INFERRAIL_TEST_ORPHAN_PARENT"

// TestChildDiesWithHarness SIGKILLs a harness process that started a
// simulator: the simulator must die with it rather than hold its port
// under PID 1.
func TestChildDiesWithHarness(t *testing.T) {
	if os.Getenv(orphanParentVar) == "1" {
		sim, err := procs.StartSim(t.Context(), procs.SimOptions{Binary: os.Args[0], Env: procstest.SimEnv(), Args: []string{"--zero-latency"}})
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println("sim", sim.Pid)
		select {}
	}
	parent := exec.Command(os.Args[0], "-test.run=^TestChildDiesWithHarness$")
	parent.Env = append(os.Environ(), orphanParentVar+"=1")
	out, err := parent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	pid, err := strconv.Atoi(strings.TrimPrefix(strings.TrimSpace(line), "sim "))
	if err != nil {
		parent.Process.Kill()
		parent.Wait()
		t.Fatalf("the harness said %q", line)
	}
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	if err := parent.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	parent.Wait()
	// Gone, or a zombie waiting for PID 1 to reap it: either way dead. The
	// bound is for a broken fix, not a measurement.
	for deadline := time.Now().Add(30 * time.Second); alive(pid); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("simulator %d outlived its SIGKILLed harness", pid)
		}
	}
}

// alive reports whether pid is a process that has not exited.
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z" && fields[0] != "X"
}
