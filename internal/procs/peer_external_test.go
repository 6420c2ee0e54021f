package procs_test

import (
	"errors"
	"testing"

	"github.com/inferrail/inferrail/internal/procs"
	"github.com/inferrail/inferrail/internal/procs/procstest"
)

func TestPeerVersion(t *testing.T) {
	venv := procstest.FakePeerVenv(t, "1.2.3")
	for _, router := range procs.PeerRouters() {
		if v, err := procs.PeerVersion(venv, router); err != nil || v != "1.2.3" {
			t.Errorf("PeerVersion(%s) = %q, %v; want 1.2.3", router, v, err)
		}
	}
	if _, err := procs.PeerVersion(t.TempDir(), "vllm-router"); !errors.Is(err, procs.ErrNoPeerVenv) {
		t.Errorf("PeerVersion of an empty venv: %v, want ErrNoPeerVenv", err)
	}
	if _, err := procs.PeerVersion(venv, "nginx"); err == nil {
		t.Error("PeerVersion of an unknown router: no error")
	}
}
