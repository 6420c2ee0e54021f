package events

import (
	"errors"
	"strconv"

	"github.com/tinylib/msgp/msgp"
)

// The reasons DecodeBatch refuses a payload. Every error it returns is a
// *DecodeError wrapping one of these, so callers test with errors.Is and
// read where it failed from the DecodeError.
var (
	// ErrTruncated: the payload ends inside a value.
	ErrTruncated = errors.New("truncated payload")
	// ErrType: a value has a msgpack type the field cannot take (a string
	// where a list belongs, nil for a required list, 0xc1, ...).
	ErrType = errors.New("unexpected msgpack type")
	// ErrRange: an integer does not fit its field (a token id outside
	// uint32, a negative block size, an unsigned value past int64).
	ErrRange = errors.New("integer out of range")
	// ErrTooLong: an array or map header claims more elements than bytes
	// remain, so the payload cannot hold them; it is refused before
	// anything is allocated for them.
	ErrTooLong = errors.New("length exceeds the payload")
	// ErrMissingField: an event lacks its tag or a field it cannot do
	// without (block_hashes; token_ids and block_size for BlockStored), or
	// the batch lacks its events.
	ErrMissingField = errors.New("required field missing")
	// ErrTrailing: bytes follow the batch; one payload is one batch.
	ErrTrailing = errors.New("bytes after the batch")
	// ErrTooMany: the batch holds more than MaxBatchEvents events, or its
	// events list more than MaxBatchHashes block hashes or extra keys in
	// all.
	ErrTooMany = errors.New("more events, block hashes or extra keys than a batch may hold")
)

// MaxBatchHashes bounds the block hashes of one batch, its events' lists
// together. An engine's step stores and evicts at most a few cachefuls of
// blocks (a million-token prompt is 65,536 blocks of 16), and a decoded
// hash takes 32 bytes whatever its size on the wire: a payload of a
// million one-byte hashes would otherwise cost 32 times its size.
const MaxBatchHashes = 1 << 20

// MaxBatchEvents bounds the events of one batch. vLLM sends one BlockStored
// per request and KV cache group a step and one BlockRemoved per evicted
// block, so a step's events are about its blocks: 65,536 for a step of a
// million tokens in blocks of 16. SGLang sends one BlockStored per page
// (assumed: the spec gives its events' schema only), a step's tokens in
// pages of 1, so it may hold as many events as MaxBatchHashes allows
// hashes (2^17 refused a step caching 131,073 tokens). A decoded event
// takes 272 bytes, and may take 15 on the wire: 2^20 of them are 272 MiB,
// about what the token ids a payload can hold take (64 MiB of one-byte
// ids are 256 MiB), and the feed lets go of so large a decode buffer after
// the batch. Applying them is bounded per hold of a replica's lock by the
// index (index.Approx.ApplyEvents), not by this.
const MaxBatchEvents = 1 << 20

// DecodeError says where DecodeBatch gave up on a payload and why.
type DecodeError struct {
	// Offset is the byte offset in the payload of the value that failed.
	Offset int
	// Event is the index of the event in the batch's events list (counting
	// skipped events), or -1 when the failure is outside any event.
	Event int
	// Field is the wire name of the field being read ("ts", "events",
	// "token_ids", "type", ...), or "" for the batch's own array.
	Field string
	// Err is one of the sentinel errors: ErrTruncated, ErrType, ErrRange,
	// ErrTooLong, ErrMissingField, ErrTrailing or ErrTooMany.
	Err error
}

func (e *DecodeError) Error() string {
	s := "events: decoding batch: "
	if e.Event >= 0 {
		s += "event " + strconv.Itoa(e.Event) + ": "
	}
	if e.Field != "" {
		s += e.Field + ": "
	}
	return s + e.Err.Error() + " at byte " + strconv.Itoa(e.Offset)
}

func (e *DecodeError) Unwrap() error { return e.Err }

// sentinel maps an error of msgp's byte-slice readers to ours, so that
// callers see one vocabulary whichever primitive failed.
func sentinel(err error) error {
	if errors.Is(err, msgp.ErrShortBytes) {
		return ErrTruncated
	}
	var (
		below msgp.UintBelowZero
		uover msgp.UintOverflow
		iover msgp.IntOverflow
	)
	if errors.As(err, &below) || errors.As(err, &uover) || errors.As(err, &iover) {
		return ErrRange
	}
	return ErrType // a TypeError or InvalidPrefixError
}
