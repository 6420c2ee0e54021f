package gateway

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's run when any goroutine a test started is
// still running after every test has ended: each one must have an owner
// that stops it. The one exception is the decision log's file pruner,
// which lumberjack starts with its first file and never stops.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("gopkg.in/natefinch/lumberjack%2ev2.(*Logger).millRun"))
}
