package sim

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's run when any goroutine a test started is
// still running after every test has ended: each one must have an owner
// that stops it.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
