// Package auth holds the gateway's API keys: making them, storing them
// hashed in a keys file, reading that file (and rereading it when it
// changes), and finding the key an Authorization header names.
//
// A key is "irk-" and 43 base64url characters: 256 random bits. The file
// keeps only its SHA-256, as "sha256:" and 64 hex digits, so neither the
// file nor a log that quotes it can give a key away. A plain hash is the
// right tool here, where a password would need a slow one (bcrypt,
// Argon2): a slow hash protects guessable secrets from a stolen file, and
// 256 random bits are not guessable, so the slowness would buy nothing
// and cost every request milliseconds. A fast hash also lets the key be
// found by looking its hash up in a map, which compares hashes, never
// the secret, so timing tells an attacker nothing about any key.
//
// The keys file:
//
//	keys:
//	  - name: team-a               # required, unique; at most 63 of A-Z a-z 0-9 . _ -
//	    hash: sha256:9f86d08…      # required, unique: inferrail-gateway keygen prints it
//	    models: [llama-8b]         # model names or aliases it may use, as the config in effect resolves them; absent: every model
//	    priority: standard         # critical, standard (the default) or sheddable
//	    limits:                    # per minute, across models; 0 or absent: no limit
//	      requests_per_minute: 600
//	      prompt_tokens_per_minute: 200000
//	      output_tokens_per_minute: 50000
//
// An admin keys file has names and hashes only.
package auth
