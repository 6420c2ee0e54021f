package cli

import (
	"errors"
	"flag"
	"fmt"
	"runtime"
	"testing"
)

func TestExitCode(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want int
	}{
		{"none", nil, 0},
		{"help", flag.ErrHelp, 0},
		{"wrapped_help", fmt.Errorf("run: %w", flag.ErrHelp), 0},
		{"failure", errors.New("no command given"), 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ExitCode(tt.err); got != tt.want {
				t.Errorf("ExitCode(%v) = %d, want %d", tt.err, got, tt.want)
			}
		})
	}
}

func TestBuild(t *testing.T) {
	tests := []struct {
		name string
		b    Build
		want string
	}{
		{"clean", Build{Version: "v0.2.0", Revision: "abc123", GoVersion: "go1.27.3"}, "v0.2.0, commit abc123, go1.27.3"},
		{"modified", Build{Version: "(devel)", Revision: "abc123", GoVersion: "go1.27.3", Modified: true}, "(devel), commit abc123 (modified), go1.27.3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.b.String(); got != tt.want {
				t.Errorf("String() = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestReadBuildTakesTheStamp: the commit make build stamps is what a
// binary without Go's own VCS stamp (a test binary is one) names.
func TestReadBuildTakesTheStamp(t *testing.T) {
	if got := ReadBuild(); got.Revision != "unknown" || got.GoVersion != runtime.Version() {
		t.Fatalf("unstamped: %+v, want revision unknown and %s", got, runtime.Version())
	}
	defer func(r, m string) { stampedRevision, stampedModified = r, m }(stampedRevision, stampedModified)
	stampedRevision, stampedModified = "0123abcd", "true"
	if got := ReadBuild(); got.Revision != "0123abcd" || !got.Modified {
		t.Errorf("stamped: %+v, want revision 0123abcd, modified", got)
	}
}
