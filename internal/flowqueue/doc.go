// Package flowqueue is the waiting room of requests that found no room:
// a bounded queue in priority classes, shared fairly between keys within
// a class.
//
// Order. A lower class number always goes first: no entry of class c
// leaves by Pop while one of a class below c waits. Within a class, keys
// take turns by start-time fair queuing with unit cost: an entry's start
// tag is the later of its class's virtual time and the finish tag of its
// key's previous entry, its finish tag one more; Pop takes the smallest
// start tag (the oldest on ties) and moves the class's virtual time to it.
// A key that floods thus waits behind its own backlog while a key that
// sends one request at a time is served within one turn of every other
// key, and a key whose entries have all left is forgotten, so memory is
// bounded by the entries queued, however many keys pass through.
//
// Bounds. Push refuses an entry when the queue holds Limits.Max entries,
// its class Limits.Class[c], or its key (within the class) Limits.Key.
// Deadlines. Expire removes every entry whose deadline has passed.
//
// A Queue is a plain data structure: it reads no clock and starts no
// goroutine, and it is not safe for concurrent use; its owner locks it.
package flowqueue
