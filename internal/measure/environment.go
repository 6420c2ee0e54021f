package measure

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"
)

// Environment describes where a result was measured.
type Environment struct {
	GitCommit string `json:"git_commit,omitempty"`
	GitDirty  bool   `json:"git_dirty"` // the work tree had uncommitted changes
	Date      string `json:"date"`      // RFC 3339, UTC
	GoVersion string `json:"go_version"`
	GOOS      string `json:"goos"`
	GOARCH    string `json:"goarch"`
	NumCPU    int    `json:"num_cpu"`
	CPUModel  string `json:"cpu_model,omitempty"`
	// Note says how to read the figures.
	Note string `json:"note"`
}

// MarshalJSON leaves git_dirty out with no commit: outside a git checkout
// "not dirty" would claim what nobody checked.
func (e Environment) MarshalJSON() ([]byte, error) {
	type plain Environment
	if e.GitCommit != "" {
		return json.Marshal(plain(e))
	}
	return json.Marshal(struct {
		plain
		GitDirty bool `json:"git_dirty,omitempty"` // hides plain's
	}{plain: plain(e)})
}

// MachineNote is the Note CurrentEnvironment records.
const MachineNote = "Shared, noisy machine; the load generator and the simulator run on the same CPUs."

// CurrentEnvironment describes this machine and the git work tree in the
// current directory (left blank when git is unavailable).
func CurrentEnvironment(ctx context.Context) Environment {
	e := Environment{
		Date:      time.Now().UTC().Format(time.RFC3339),
		GoVersion: runtime.Version(),
		GOOS:      runtime.GOOS,
		GOARCH:    runtime.GOARCH,
		NumCPU:    runtime.NumCPU(),
		CPUModel:  cpuModel(),
		Note:      MachineNote,
	}
	if out, err := exec.CommandContext(ctx, "git", "rev-parse", "HEAD").Output(); err == nil {
		e.GitCommit = strings.TrimSpace(string(out))
		if st, err := exec.CommandContext(ctx, "git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil {
			e.GitDirty = len(bytes.TrimSpace(st)) > 0
		}
	}
	return e
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
