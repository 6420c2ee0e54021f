package gateway

import (
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/auth"
	"github.com/inferrail/inferrail/internal/openai"
)

// FuzzAdmissionHeaders: whatever a client puts in x-inferrail-priority and
// x-inferrail-ttft-target-ms, reading them never panics; a request is
// either refused with 400 in OpenAI's shape or gets a class no more
// important than its key's and a target within (0, 1 h].
func FuzzAdmissionHeaders(f *testing.F) {
	for _, s := range [][2]string{{"critical", "2000"}, {"sheddable", "1"}, {"", ""}, {"standard", "-5"}, {"x", "3600000"}, {"critical\x00", "1e3"}} {
		f.Add(s[0], s[1], int8(0))
	}
	// Keys of the less important classes, which a header may not outrank.
	f.Add("critical", "60000", int8(1))
	f.Add("standard", "", int8(2))
	f.Add("", "07", int8(2))
	f.Fuzz(func(t *testing.T, prio, target string, keyClass int8) {
		maxClass := auth.Classes[int(uint8(keyClass))%len(auth.Classes)]
		r := httptest.NewRequest("POST", "/v1/completions", nil)
		if prio != "" {
			r.Header[openai.HeaderPriority] = []string{prio}
		}
		if target != "" {
			r.Header[openai.HeaderTTFTTarget] = []string{target}
		}
		a, err := admissionFor(r, nil, maxClass, 0)
		if err != nil {
			if rf := refusalOf(err); rf.answer.Status != 400 {
				t.Fatalf("refused with %d, want 400", rf.answer.Status)
			}
			return
		}
		if a.class < maxClass || a.class > auth.Sheddable {
			t.Fatalf("class %v with a key of class %v", a.class, maxClass)
		}
		if target != "" && (a.target <= 0 || a.target > time.Hour) {
			t.Fatalf("target %v from %q", a.target, target)
		}
		// Exactly: the class asked for when the key allows it, else the
		// key's (README: asking for more than the key's class gets the
		// key's class); the target as many milliseconds as the header says.
		asked, named := map[string]auth.Priority{"critical": auth.Critical, "standard": auth.Standard, "sheddable": auth.Sheddable}[prio]
		switch {
		case prio == "" && a.class != maxClass:
			t.Fatalf("no header: class %v with a key of class %v", a.class, maxClass)
		case prio != "" && !named:
			t.Fatalf("%q accepted as class %v", prio, a.class)
		case prio != "" && a.class != max(asked, maxClass):
			t.Fatalf("%q with a key of class %v: class %v", prio, maxClass, a.class)
		}
		if ms, err := strconv.ParseInt(target, 10, 64); target == "" && a.target != 0 || target != "" && (err != nil || a.target != time.Duration(ms)*time.Millisecond) {
			t.Fatalf("target %v from %q", a.target, target)
		}
	})
}
