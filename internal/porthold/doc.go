// Package porthold keeps a loopback port taken without serving on it: the
// port is bound but not listening, so connections to it are refused as to
// a closed port, yet the kernel hands it neither to an outgoing
// connection's local end nor to another ":0" listener. Tests hold the port
// of a simulator they killed until they restart it, and a port meant to
// stay dead (an unreachable collector) for as long as they need it dead;
// on a busy machine a merely closed port was taken in between.
package porthold
