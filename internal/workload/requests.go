package workload

import (
	"context"
	"slices"
	"time"
)

// Requests are a workload's requests in time order, each made when it is
// asked for. What a run schedules by is known up front: each request's
// time, kind, session and lengths (Head). A trace's bodies are made only
// by Request: a trace's records are bounded but the trace is not, and a
// long trace of long prompts made all at once would hold gigabytes.
type Requests struct {
	heads []Request          // every request; Body nil where body makes it
	body  func(i int) []byte // nil when heads hold every body
}

// NewRequests returns requests already made, in time order, as Requests.
func NewRequests(reqs []Request) *Requests { return &Requests{heads: reqs} }

// Len is the number of requests.
func (r *Requests) Len() int { return len(r.heads) }

// Head is request i as scheduled, without its Body when Request makes it.
func (r *Requests) Head(i int) Request { return r.heads[i] }

// Request is request i whole, its body made now if it is made on demand:
// the same body each time, whatever else was made before. It is safe for
// concurrent use.
func (r *Requests) Request(i int) Request {
	q := r.heads[i]
	if r.body != nil {
		q.Body = r.body(i)
	}
	return q
}

// Retimed returns the same requests, each scheduled at(Head(i).At)
// instead; at must not reorder them.
func (r *Requests) Retimed(at func(time.Duration) time.Duration) *Requests {
	heads := slices.Clone(r.heads)
	for i := range heads {
		heads[i].At = at(heads[i].At)
	}
	return &Requests{heads: heads, body: r.body}
}

// All makes every request, stopping with ctx's error when ctx is done.
func (r *Requests) All(ctx context.Context) ([]Request, error) {
	if r.body == nil {
		return r.heads, nil
	}
	reqs := make([]Request, len(r.heads))
	for i := range reqs {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		reqs[i] = r.Request(i)
	}
	return reqs, nil
}
