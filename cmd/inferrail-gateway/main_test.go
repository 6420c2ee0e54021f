package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"--check", "--config", "../../deploy/local.yaml"}, &out, &errOut); err != nil {
		t.Fatalf("--check of the quick-start config: %v", err)
	}
	if !strings.Contains(out.String(), "valid (1 models, 3 replicas") {
		t.Errorf("--check printed %q", out.String())
	}
	if strings.Contains(out.String(), "note:") {
		t.Errorf("--check of a config whose tokenizers all load printed notes: %q", out.String())
	}
	odd := filepath.Join(t.TempDir(), "odd.yaml")
	if err := os.WriteFile(odd, []byte("models: [{name: m, tokenizer: /no/such/dir}, {name: n}]\nreplicas: [{id: r, url: 'http://127.0.0.1:1', models: [m, n]}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := run(context.Background(), []string{"--check", "--config", odd}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); !strings.Contains(got, "note: model m: tokenizer \"/no/such/dir\"") || !strings.Contains(got, "note: model n: no tokenizer") {
		t.Errorf("--check does not say which models route without predictions: %q", got)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("models: []\nsurprise: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := run(context.Background(), []string{"--check", "--config", bad}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "surprise") {
		t.Errorf("--check of a bad config: %v, want the unknown key named", err)
	}
	if err := run(context.Background(), nil, &out, &errOut); err == nil {
		t.Error("no --config accepted")
	}
}
