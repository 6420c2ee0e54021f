package measure

import (
	"encoding/json"
	"strings"
	"testing"
)

// git_dirty is recorded with a commit only: outside a checkout nothing
// says whether the tree was dirty.
func TestEnvironmentGitFields(t *testing.T) {
	tests := []struct {
		name string
		env  Environment
		want string
	}{
		{"checkout", Environment{GitCommit: "abc", GitDirty: false}, `"git_commit":"abc","git_dirty":false,`},
		{"dirty", Environment{GitCommit: "abc", GitDirty: true}, `"git_commit":"abc","git_dirty":true,`},
		{"no_checkout", Environment{Date: "d"}, `{"date":"d",`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(tt.env)
			if err != nil || !strings.Contains(string(b), tt.want) {
				t.Errorf("%s, %v; want %s in it", b, err, tt.want)
			}
			if tt.env.GitCommit == "" && strings.Contains(string(b), "git_") {
				t.Errorf("git fields outside a checkout: %s", b)
			}
			var back Environment
			if err := json.Unmarshal(b, &back); err != nil || back != tt.env {
				t.Errorf("read back %+v, %v", back, err)
			}
		})
	}
}
