package cli

import (
	"errors"
	"flag"
	"fmt"
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
