package procs

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
)

// errNoField is returned when /proc/<pid>/status lacks a field.
var errNoField = errors.New("field not found")

// ResidentBytes returns the resident set size (VmRSS) of process pid in
// bytes, read from /proc/<pid>/status. It works on Linux only.
func ResidentBytes(pid int) (int64, error) {
	kb, err := procStatusKB(pid, "VmRSS")
	if err != nil {
		return 0, err
	}
	return kb << 10, nil
}

// procStatusKB reads a "Name:   1234 kB" field of /proc/<pid>/status.
func procStatusKB(pid int, field string) (int64, error) {
	path := "/proc/" + strconv.Itoa(pid) + "/status"
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", path, err)
	}
	kb, err := parseStatusKB(data, field)
	if err != nil {
		return 0, fmt.Errorf("%s: %s: %w", path, field, err)
	}
	return kb, nil
}

// parseStatusKB finds "field:" in the text of a /proc status file and
// returns its value in kB.
func parseStatusKB(data []byte, field string) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		name, rest, ok := bytes.Cut(sc.Bytes(), []byte{':'})
		if !ok || string(name) != field {
			continue
		}
		f := bytes.Fields(rest)
		if len(f) != 2 || string(f[1]) != "kB" {
			return 0, fmt.Errorf("unexpected value %q", bytes.TrimSpace(rest))
		}
		return strconv.ParseInt(string(f[0]), 10, 64)
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errNoField
}

// OpenFDs counts the open file descriptors of process pid (sockets
// included), from /proc/<pid>/fd.
func OpenFDs(pid int) (int, error) {
	entries, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		return 0, fmt.Errorf("count open files: %w", err)
	}
	return len(entries), nil
}
