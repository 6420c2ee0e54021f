package decisionlog

import "github.com/inferrail/inferrail/internal/linelog"

// Options configure a Writer (linelog.Options).
type Options = linelog.Options

// Stats counts what became of the records logged so far.
type Stats = linelog.Stats

// Writer writes records as JSON lines from a goroutine of its own, dropping
// and counting those that find its queue full.
type Writer = linelog.Writer[*Record]

// Open starts a writer of records.
func Open(o Options) *Writer {
	if o.Name == "" {
		o.Name = "decision log"
	}
	return linelog.Open(o, (*Record).AppendJSON)
}
