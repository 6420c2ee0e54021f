package harness

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

// WriteJSON writes v as indented JSON, with a final newline, to path,
// making its directory if need be. It writes through a temporary file, so
// that a stopped run never leaves half a result behind.
func WriteJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write result: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write result: %w", err)
	}
	return nil
}

// ReadJSON reads the JSON file at path into a new T.
func ReadJSON[T any](path string) (*T, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &v, nil
}

// ReadDir reads every *.json file in dir, in name order.
func ReadDir[T any](dir string) ([]T, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	slices.Sort(paths)
	var out []T
	for _, p := range paths {
		v, err := ReadJSON[T](p)
		if err != nil {
			return nil, err
		}
		out = append(out, *v)
	}
	return out, nil
}
