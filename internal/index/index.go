package index

import (
	"github.com/inferrail/inferrail/internal/blockhash"
	"github.com/inferrail/inferrail/internal/events"
)

// Index tracks the KV cache blocks each replica holds. Replicas are named by
// their fleet ID. A replica is known from its Join until its Forget; one
// the index does not know holds nothing, and records, capacities and
// events for it change nothing, so that a request still running on a
// replica that left cannot bring it back. Implementations are safe for
// concurrent use by many goroutines.
//
// Every hashes argument is a chain as blockhash.Extend makes it:
// block i's hash names blocks 0 to i, so a block never appears at two
// depths or after two different parents. Implementations may rely on it:
// given hashes that are not a chain they may answer wrongly, but they must
// not fail.
type Index interface {
	// Record notes that replica now holds the blocks of a prompt routed to
	// it: hashes are the prompt's full-block hashes in chain order, block 0
	// first. It returns a Token that undoes exactly this record. Record does
	// not retain hashes.
	Record(replica string, hashes []blockhash.Hash) Token

	// RecordPrompt is Record for a prompt whose computation also takes
	// reserve blocks of the engine's cache that will hold no cached prefix
	// afterwards: the partial last block, which vLLM frees unhashed and
	// hands out first. Those slots evict cached blocks while the prompt is
	// computed, so the replica keeps at most capacity-reserve blocks after
	// the record (never fewer than the record's own).
	RecordPrompt(replica string, hashes []blockhash.Hash, reserve int) Token

	// TakeBack undoes a Record whose attempt failed before the engine
	// computed the prompt (refused, errored, or failed before answering):
	// the blocks that record added are removed again, except those a later
	// Record has touched since. Blocks held before the record stay, and
	// recency changes stay. Taking back the zero Token, a token twice, or a
	// token from before a Reset or Forget of its replica does nothing.
	TakeBack(Token)

	// Match writes to dst[i] how many leading blocks of the prompt
	// candidates[i] holds, and returns dst, resized to len(candidates)
	// (reallocated only when too small). A candidate's count stops at the
	// first block it lacks, and never reaches the block holding the prompt's
	// last token, which an engine always computes (vLLM's
	// max_cache_hit_length = num_tokens - 1): at most
	// (promptTokens-1)/blockSize blocks, so a fully cached prompt whose
	// promptTokens is a multiple of blockSize reports one block fewer than
	// it has. promptTokens <= 0 reports 0. blockSize must be positive.
	// Unknown and repeated candidates are allowed.
	Match(dst []int, candidates []string, hashes []blockhash.Hash, promptTokens, blockSize int) []int

	// Resolve names the replicas ids by the index's own handles, for a
	// caller that matches the same replicas request after request; see
	// [Handles]. Current reports whether handles still name the index's
	// replicas as they are (none joined or left since). MatchHandles is
	// Match for the candidates ids[i] of Resolve for i in positions, in that
	// order; it is correct whether or not the handles are current, and
	// fastest while they are.
	Resolve(ids []string) *Handles
	Current(*Handles) bool
	MatchHandles(dst []int, hd *Handles, positions []int, hashes []blockhash.Hash, promptTokens, blockSize int) []int

	// SetCapacity sets how many blocks replica can hold (its KV cache size),
	// evicting what no longer fits. A negative count is taken as 0.
	SetCapacity(replica string, blocks int)

	// Join adds a replica that joined the fleet, holding nothing, with the
	// default capacity; a replica already known stays as it is.
	Join(replica string)

	// Forget drops a replica that left the fleet, with everything it held
	// and its capacity.
	Forget(replica string)

	// Reset empties a replica whose engine restarted with an empty cache;
	// its capacity stays.
	Reset(replica string)

	// Stats describes the index now.
	Stats() Stats

	// AttachEvents, ApplyEvents, PurgeEvents, SetSource, Events and
	// ExpireSpeculation feed a replica's predictions from its engine's KV
	// events instead of the gateway's own routing; see [Approx.AttachEvents].
	AttachEvents(replica string, cfg EventsConfig) Attachment
	ApplyEvents(at Attachment, b *events.Batch)
	PurgeEvents(at Attachment)
	SetSource(replica string, events bool) Source
	Events(replica string) EventStats
	ExpireSpeculation()

	// Reveal shows replica's mirror a prompt routed there: its gateway
	// hashes and the TokenKey of each full block's tokens (keys[i] for
	// block i). A block of the prompt that the mirror holds as an orphan,
	// after a parent it never saw, reveals that parent and the blocks
	// before it as held (see Mirror.reveal). It reports how many blocks
	// the mirror adopted. Its search looks at about a thousand blocks at
	// most under the replica's lock; an adoption costs the prompt's blocks
	// once more.
	Reveal(replica string, hashes []blockhash.Hash, keys []uint64) int

	// SaltedRoot tells replica's mirror the gateway hash of the first
	// block of a prompt routed there with a cache salt, the TokenKey of
	// that block's tokens, and the seed of the prompt's model unsalted
	// (blockhash.Seed(model, "", "")), which names the model or adapter
	// whose blocks it keys. An engine whose events cannot carry the
	// salt (SGLang's, vLLM's before extra_keys) stores such a block under
	// its tokens alone; the mirror keys it as the salted prompt's, not as
	// an unsalted one's (see Mirror.noteSaltedRoot).
	SaltedRoot(replica string, key uint64, root, unsalted blockhash.Hash)
}

// Token identifies one Record so that TakeBack can undo it. The zero Token
// undoes nothing. Tokens are values; copy them freely.
type Token struct {
	rep   *replica         // nil when the record added nothing
	stamp uint64           // the record's stamp on the blocks it touched
	added []blockhash.Hash // blocks the record added, deepest first
	spec  speculation      // what the record made count as held (events source)
}

// Stats is a snapshot of an index.
type Stats struct {
	// Entries counts blocks held, summed over replicas: a block on three
	// replicas counts three times.
	Entries int
	// Bytes approximates the memory the index's own structures take.
	Bytes int64
	// Replicas has one entry per known replica, sorted by ID.
	Replicas []ReplicaStats
}

// ReplicaStats is one replica's part of [Stats].
type ReplicaStats struct {
	ID       string
	Held     int // blocks the index assumes cached there
	Capacity int // blocks the replica can hold
	Source   Source
}

// hitLimit is how many of a prompt's blocks an engine may serve from its
// cache: all of its full blocks except the one holding the last token.
func hitLimit(blocks, promptTokens, blockSize int) int {
	if blockSize <= 0 {
		panic("index: Match with a block size below 1")
	}
	if promptTokens <= 0 {
		return 0
	}
	return min(blocks, (promptTokens-1)/blockSize)
}
