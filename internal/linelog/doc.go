// Package linelog writes lines, JSON lines in practice, to a file rotated
// by size, from a goroutine of its own, off the path of whoever logs them.
// Logging never waits: items go to a bounded queue, and an item that finds
// it full (the disk fell behind) is dropped and counted. A line a failed
// write, or an earlier run, left cut short is ended before the next line
// is written, so that no line is glued onto it. The decision log
// and the traffic capture write through it. NewScanner reads such files
// back, a line of any length in time linear in it.
package linelog
