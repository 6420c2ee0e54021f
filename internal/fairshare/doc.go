// Package fairshare divides a fleet's in-flight slots fairly between the
// flows that use it, a flow being one key's requests in one priority
// class.
//
// Activity. A flow is active while it holds a request (waiting or in
// flight) and for Window after its last one ended. A flow of class c
// counts the active flows of classes 0 to c, itself included: the more
// important classes shrink a less important flow's share, never the
// reverse.
//
// Share. With S slots (the replicas' concurrency guards, summed) and A
// flows counted, a flow's share is max(1, S/A) slots, rounded down. A flow
// already holding its share in flight waits, even while a slot is free:
// the slots it leaves are the headroom in which another active flow starts
// at once, however hard the first one floods. Alone, a flow's share is
// every slot: sharing costs nothing while nobody else is there. With
// several flows, up to A-1 slots may stay idle through rounding, and the
// unused part of a quiet flow's share stays idle while it is active: that
// idle room is the price of its never waiting for a slot.
//
// Memory is bounded by the flows holding requests plus those that ended
// one within Window: a flow idle for longer is forgotten.
//
// A Table is a plain data structure: it reads no clock (every method takes
// now) and starts no goroutine, and it is not safe for concurrent use; its
// owner locks it.
package fairshare
