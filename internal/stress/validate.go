package stress

import (
	"errors"
	"fmt"
	"time"
)

// Prefixed puts path in front of each error joined in err.
func Prefixed(path string, err error) []error {
	if err == nil {
		return nil
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	out := make([]error, len(errs))
	for i, e := range errs {
		out[i] = fmt.Errorf("%s.%w", path, e)
	}
	return out
}

// Positive is the problem of a setting at path that must be above zero,
// nil when it is.
func Positive[T int | int64 | time.Duration](path string, v T) error {
	if v <= 0 {
		return fmt.Errorf("%s: must be positive, got %v", path, v)
	}
	return nil
}

// NotNegative is the problem of a setting at path that must not be below
// zero, nil when it is not.
func NotNegative[T int | int64 | time.Duration](path string, v T) error {
	if v < 0 {
		return fmt.Errorf("%s: must not be negative, got %v", path, v)
	}
	return nil
}

// Required is the problem of a setting at path that must not be empty,
// nil when it is not.
func Required(path, v string) error {
	if v == "" {
		return errors.New(path + ": required")
	}
	return nil
}
