// Package openai holds what the OpenAI-compatible wire format needs on both
// sides of a connection: vLLM's error bodies, JSON string escaping that
// matches Python's, and server-sent event framing.
package openai
