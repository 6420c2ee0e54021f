// Package fairshare divides a fleet's in-flight slots fairly between the
// flows that use it, a flow being one key's requests in one priority
// class.
//
// Activity. A flow is active while it holds a request (waiting or in
// flight) and for Window after its last one ended. A flow of class c
// counts the keys with an active flow of classes 0 to c, its own
// included, each key once however many of those classes it has requests
// in: the more important classes shrink a less important flow's share,
// never the reverse, and a key is one sharer, not one per class.
//
// Share. With S slots (the replicas' concurrency guards, summed) and A
// keys counted, a flow's share is max(1, S/A) slots, rounded down. A flow
// under its share may take a free slot (Under), and the queue's owner
// serves such flows first. A flow at or past its share may take one only
// while a slot is free beyond the headroom of the others (Allowed): the
// part of their shares they do not hold, summed over the flows counted
// against it that have no request waiting. So however hard one flow
// floods, the others find their unused shares free and start at once; a
// flow whose own requests pile past its share (a burst) may borrow what
// nobody idle is owed, and takes its turn in the queue's order against
// flows that also wait. Alone, a flow's share is every slot: sharing costs
// nothing while nobody else is there. The price is idle room: while a
// quiet flow is active, the part of its share it does not use stays free
// for it.
//
// Credit. Shares are also kept over time. A flow's usage is the slots it
// held on average, each moment weighted by e^(-age/Window); the whole
// slots of its share that usage leaves unused are its credit. A flow with
// credit is owed (Owed) while it is Allowed a slot and holds fewer than
// its share plus its credit: its owner serves it before flows merely
// under their share. And the room kept for a flow with nothing waiting is
// not only its share: where it held more at once lately (its peak over
// the last one to two windows), or its usage u says its bursts will
// (u + 3√u, what independent arrivals pass a few moments in a thousand,
// where that fits in its share plus its credit), it is that much, up to
// its share plus its credit. The part past its share comes out of the
// others' shares (Extra): their share and room count less by it, and the
// part not yet used (Burst) is kept even from flows under their share.
// So a quiet flow whose requests come in bursts finds room for them, even
// for the first past its share, instead of waiting for a slot held by a
// flooder that uses its whole share all the time (a flooder has no
// credit, or bursts that would not fit it: no burst room). The price
// grows with it: the burst room stays idle between bursts.
//
// Memory is bounded by the flows holding requests plus those that ended
// one within Window: a flow idle for longer is forgotten.
//
// A Table is a plain data structure: it reads no clock (every method takes
// now) and starts no goroutine, and it is not safe for concurrent use; its
// owner locks it.
package fairshare
