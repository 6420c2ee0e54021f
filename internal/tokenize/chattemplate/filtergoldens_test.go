package chattemplate

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"errors"
	"os"
	"testing"
)

// TestFilterGoldens: templates applying the filters, tests and methods
// the renderer replaces (named as strings to map, select and the like,
// map('map', 'upper') among them; case mapped in full: ß, a final sigma,
// Turkish i, title-case digraphs; tuples, namespaces, unpacked
// arguments) render as Jinja2 renders them under transformers, or fail
// where it raises. scripts/goldens/filter_goldens.py wrote the file with
// the pinned reference stack.
func TestFilterGoldens(t *testing.T) {
	f, err := os.Open("testdata/filters.jsonl.gz")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(z)
	n := 0
	for sc.Scan() {
		var c struct {
			Template string  `json:"template"`
			Content  string  `json:"content"`
			Text     *string `json:"text"`
			Error    string  `json:"error"`
		}
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatal(err)
		}
		n++
		got, err := renderOne(t, c.Template, c.Content)
		var terr *Error
		switch {
		case c.Text == nil && !errors.As(err, &terr):
			t.Errorf("%s\nover %q renders %q, %v; Jinja2 raises %s", c.Template, c.Content, got, err, c.Error)
		case c.Text != nil && (err != nil || got != *c.Text):
			t.Errorf("%s\nover %q renders %q, %v; Jinja2 renders %q", c.Template, c.Content, got, err, *c.Text)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if n < 20 {
		t.Errorf("%d cases, want the 20 the script writes", n)
	}
}
