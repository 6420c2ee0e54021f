package openai

// HTTP headers of the wire contract between clients, the gateway and
// engines. The canonical forms are used, so Header.Get and Set need no
// canonicalization.
const (
	// HeaderRequestID carries a request's ID: the client's own when well
	// formed (see ValidRequestID), which vLLM also takes as the response id.
	HeaderRequestID = "X-Request-Id"
	// HeaderSession names the conversation a request belongs to.
	HeaderSession = "X-Session-Id"
	// HeaderPriority asks for a priority class: critical, standard or
	// sheddable, no more important than the request's key allows.
	HeaderPriority = "X-Inferrail-Priority"
	// HeaderTTFTTarget asks for a time to first token, in whole
	// milliseconds: the gateway admits the request only while some
	// replica's estimate meets it.
	HeaderTTFTTarget = "X-Inferrail-Ttft-Target-Ms"

	// Headers the gateway adds to proxied responses.
	HeaderReplica      = "X-Inferrail-Replica"       // the replica that served it
	HeaderPolicy       = "X-Inferrail-Policy"        // the policy that routed it
	HeaderPromptTokens = "X-Inferrail-Prompt-Tokens" // the prompt's length, when tokenized
	HeaderCachedTokens = "X-Inferrail-Cached-Tokens" // cached tokens predicted on the replica
	// HeaderEstimatedTTFT is the routing decision's estimate of the time to
	// first token on the replica, in seconds, as the cost model prices it;
	// set when the gateway made one.
	HeaderEstimatedTTFT = "X-Inferrail-Estimated-Ttft"
	// HeaderGatewayMs is how long the gateway held the request before it
	// sent the attempt that answered, in milliseconds: reading its body,
	// tokenizing, waiting in the flow control queue, routing and earlier
	// attempts. The rest of a response's time to first token is the
	// engine's and the network's.
	HeaderGatewayMs = "X-Inferrail-Gateway-Ms"
)
