// Package ratelimit limits requests and tokens per minute with token
// buckets.
//
// A Bucket holds up to one period's worth of its limit and refills
// continuously. Its level is kept in fixed point (a token is as many units
// as the period has microseconds, and each microsecond adds Limit units),
// so refills, takes and refunds are exact integer arithmetic with no
// rounding to drift, and a bucket agrees with a rational-number model of
// itself to the token (see the property test).
//
// A Bucket may go into debt: Charge takes tokens without asking, which is
// how output tokens are paid when a response ends, after the engine said
// how many it generated. Admit only takes when the bucket can pay, and a
// bucket in debt admits nothing until it has refilled past zero. Debt is
// bounded at one full bucket: a charge past it is forgiven, so that many
// requests settling at once cannot lock a bucket for longer than two
// periods' refill.
//
// Why not golang.org/x/time/rate: its Limiter cannot be charged past its
// burst after the fact (ReserveN refuses n > burst), a cancelled
// reservation restores tokens only in some cases, and it keeps float64
// tokens; the gateway needs debt, exact refunds, and the remaining tokens
// and time to full for OpenAI's x-ratelimit headers. The bucket is 100
// lines; its reference model is the test.
//
// Buckets are named by an ID and kept by a Limiter. Local keeps them in
// this process, so limits are per gateway instance. A Limiter shared by
// several gateways would keep the same state in a shared store, such as
// Redis running a GCRA or token bucket script per Admit, and implement
// the same interface.
package ratelimit
