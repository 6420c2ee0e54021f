package tokenizetest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Corpus is English and Go code from the pinned Go toolchain (the go
// command's documentation and net/http's server), cut at line ends into
// chunks of at most 4 KiB, the size of a typical prompt.
// BenchmarkHFEncode encodes it, and
// scripts/goldens/bench_tokenizers.py encodes the same chunks with HF
// tokenizers for comparison.
func Corpus(b *testing.B) (chunks []string, size int) {
	b.Helper()
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		b.Fatalf("go env GOROOT: %v", err)
	}
	root := strings.TrimSpace(string(out))
	for _, name := range []string{"src/cmd/go/alldocs.go", "src/net/http/server.go"} {
		data, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			b.Fatal(err)
		}
		chunks = append(chunks, chunkLines(string(data), 4096)...)
	}
	for _, c := range chunks {
		size += len(c)
	}
	return chunks, size
}

// chunkLines cuts s after newlines into chunks of at most max bytes (a longer
// line is a chunk of its own).
func chunkLines(s string, max int) []string {
	var chunks []string
	start, end := 0, 0
	for end < len(s) {
		next := strings.IndexByte(s[end:], '\n')
		if next < 0 {
			next = len(s)
		} else {
			next += end + 1
		}
		if next-start > max && end > start {
			chunks = append(chunks, s[start:end])
			start = end
		}
		end = next
	}
	if end > start {
		chunks = append(chunks, s[start:end])
	}
	return chunks
}

// corpusTaker returns take, which returns the next lines of Corpus, from
// its start, until they make at least tokens tokens as count counts them.
func corpusTaker(b *testing.B, count func(text string) int) (take func(tokens int) string) {
	b.Helper()
	chunks, _ := Corpus(b)
	var lines []string
	for _, c := range chunks {
		lines = append(lines, strings.SplitAfter(c, "\n")...)
	}
	return func(tokens int) string {
		var sb strings.Builder
		for n := 0; n < tokens; {
			l := lines[0]
			lines = lines[1:]
			sb.WriteString(l)
			n += count(l)
		}
		return sb.String()
	}
}

// Chat8k builds a Qwen3 (ChatML) chat of about 8,000 tokens, as count
// counts them (Qwen3's tokenizer, for the figures to compare), from Corpus:
// a system turn of about 5,000 tokens and five turns of about 600.
// turns(tag) renders it, with tag put at the start of every turn after the
// system one so that they can be made new while the system turn is not.
func Chat8k(b *testing.B, count func(text string) int) (system string, turns func(tag string) string) {
	b.Helper()
	take := corpusTaker(b, count)
	system = "<|im_start|>system\n" + take(5000) + "<|im_end|>\n"
	var rest []string
	for i := range 5 {
		rest = append(rest, []string{"user", "assistant"}[i%2], take(600))
	}
	turns = func(tag string) string {
		var sb strings.Builder
		sb.WriteString(system)
		for i := 0; i < len(rest); i += 2 {
			sb.WriteString("<|im_start|>" + rest[i] + "\n" + tag)
			sb.WriteString(rest[i+1])
			sb.WriteString("<|im_end|>\n")
		}
		sb.WriteString("<|im_start|>assistant\n")
		return sb.String()
	}
	return system, turns
}

// Chat8kOneTurn builds another Qwen3 chat of about 8,000 tokens from the
// same text: a system turn of about 7,500 tokens and one user turn of about
// 450, then the generation prompt. chat(tag) renders it with tag at the
// start of the user turn.
func Chat8kOneTurn(b *testing.B, count func(text string) int) (system string, chat func(tag string) string) {
	b.Helper()
	take := corpusTaker(b, count)
	system = "<|im_start|>system\n" + take(7500) + "<|im_end|>\n"
	user := take(450)
	chat = func(tag string) string {
		return system + "<|im_start|>user\n" + tag + user + "<|im_end|>\n<|im_start|>assistant\n"
	}
	return system, chat
}
