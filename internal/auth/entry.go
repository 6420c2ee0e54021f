package auth

import (
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/inferrail/inferrail/internal/config"
)

// entry is a key as the keys file writes it.
type entry struct {
	Name     string         `yaml:"name"`
	Hash     string         `yaml:"hash"`
	Models   []string       `yaml:"models,omitempty,flow"`
	Priority string         `yaml:"priority,omitempty"`
	TTFT     string         `yaml:"ttft_target,omitempty"`
	Limits   *config.Limits `yaml:"limits,omitempty"`
}

// FormatFile writes keys as a keys file that Parse reads back to the same
// keys. Zero limits, every model and the standard priority are left out.
func FormatFile(keys []*Key) string {
	if len(keys) == 0 {
		return "keys: []\n" // "keys:" alone is refused as a file cut short
	}
	var b strings.Builder
	b.WriteString("keys:\n")
	for _, k := range keys {
		b.WriteString(FormatEntry(k))
	}
	return b.String()
}

// FormatEntry writes one key as an item of a keys file's list, indented to
// go under "keys:".
func FormatEntry(k *Key) string {
	e := entry{Name: k.Name, Hash: k.Hash.String(), Models: k.Models}
	if k.Priority != Standard {
		e.Priority = k.Priority.String()
	}
	if k.TTFTTarget > 0 {
		e.TTFT = k.TTFTTarget.String()
	}
	if !k.Limits.IsZero() {
		l := k.Limits
		e.Limits = &l
	}
	out, err := yaml.Marshal([]entry{e})
	if err != nil {
		panic("auth: marshal a key entry: " + err.Error()) // strings and ints always marshal
	}
	lines := strings.SplitAfter(strings.TrimSuffix(string(out), "\n"), "\n")
	var b strings.Builder
	for _, l := range lines {
		b.WriteString("  " + l)
	}
	b.WriteString("\n")
	return b.String()
}
