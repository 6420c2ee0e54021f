package openai

// ArrayPromptTokens estimates the tokens of a completion's prompt whose
// value, raw (valid JSON), is an array: a batch of prompts, or one prompt
// of token ids. A token id counts one token wherever it sits (an id of the
// prompt, or one of a batch's id lists), a string its bytes as written
// between its quotes over bytesPerToken, rounded up, and any other element
// its bytes over bytesPerToken, rounded up. It reads raw once and
// allocates nothing; ok is false when raw is not an array.
func ArrayPromptTokens(raw []byte, bytesPerToken int) (tokens int, ok bool) {
	if len(raw) == 0 || raw[0] != '[' {
		return 0, false
	}
	for i := skipSpace(raw, 1); i < len(raw) && raw[i] != ']'; {
		end := skipValue(raw, i)
		switch c := raw[i]; {
		case c == '"':
			tokens += ceilDiv(end-i-2, bytesPerToken)
		case c == '[':
			tokens += elements(raw[i:end])
		case c == '-' || c >= '0' && c <= '9':
			tokens++
		default:
			tokens += ceilDiv(end-i, bytesPerToken)
		}
		i = skipSpace(raw, end)
		if i < len(raw) && raw[i] == ',' {
			i = skipSpace(raw, i+1)
		}
	}
	return tokens, true
}

// elements counts the elements of a JSON array, raw.
func elements(raw []byte) int {
	n := 0
	for i := skipSpace(raw, 1); i < len(raw) && raw[i] != ']'; n++ {
		i = skipSpace(raw, skipValue(raw, i))
		if i < len(raw) && raw[i] == ',' {
			i = skipSpace(raw, i+1)
		}
	}
	return n
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// Prompts is how many prompts a completion's "prompt" value, raw, holds as
// vLLM reads it: a batch, an array of texts or of token-id lists, one per
// element, each generating its own choices; anything else (a text, one
// list of token ids, an empty array the engine refuses) one.
func Prompts(raw []byte) int {
	if len(raw) == 0 || raw[0] != '[' {
		return 1
	}
	if i := skipSpace(raw, 1); i >= len(raw) || raw[i] != '"' && raw[i] != '[' {
		return 1
	}
	return max(elements(raw), 1)
}
