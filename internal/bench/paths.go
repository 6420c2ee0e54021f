package bench

import (
	"fmt"
	"os"
)

// WritableDir reports whether dir is a directory this process can create
// files in, by creating one there and removing it: permission bits do not
// tell (root passes them, a read-only mount does not show in them).
func WritableDir(dir string) error {
	st, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("%s: not a directory", dir)
	}
	f, err := os.CreateTemp(dir, ".inferrail-write-check-*")
	if err != nil {
		return fmt.Errorf("%s: not writable: %w", dir, err)
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}
