//go:build unix

package filewatch

import (
	"os"
	"syscall"
)

// inodeOf returns the file's inode, which a rename over the path changes.
func inodeOf(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Ino)
	}
	return 0
}
