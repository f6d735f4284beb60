package pipeline

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/toolmux/toolmux/internal/toolglob"
	"github.com/toolmux/toolmux/tool"
)

// Duplicate detection policies.
const (
	dedupeAllow  = "allow"
	dedupeWarn   = "warn"
	dedupeReject = "reject"
)

// maxDedupeNamespaces bounds how many (task, session) pairs duplicate
// detection remembers; past it, the least recently used is forgotten.
const maxDedupeNamespaces = 10_000

// dedupeTool is a parsed DedupeTool.
type dedupeTool struct {
	tools  toolglob.Pattern
	keys   []string // nil: the global keys
	policy string   // "": the global policy
}

// Dedupe detects repeated queries: calls of the same tool with the same
// key arguments (normalised: URLs canonical, text trimmed and case-folded)
// in the same task and session. It counts the calls of turns the caller
// committed and those of the current turn, so a turn the caller rolls back
// is forgotten (see [Dedupe.Commit] and [Dedupe.Discard]). Calls without a
// task, and calls with none of the key arguments, are never duplicates.
//
// Memory is bounded: at most 10 000 (task, session) namespaces are kept,
// the least recently used forgotten first, and each holds one counter per
// distinct query made in it (a 64-character hash) plus the current turn's
// list. EndTask forgets a task at once.
//
// A Dedupe is safe for concurrent use.
type Dedupe struct {
	keys   []string
	policy string
	tools  []dedupeTool
	max    int

	mu    sync.Mutex
	tasks map[string]map[string]*dedupeSpace // task -> session -> state
	lru   *list.List                         // of *dedupeSpace, most recent first
}

// dedupeSpace is the state of one (task, session).
type dedupeSpace struct {
	task, session string
	committed     map[string]int // fingerprint -> calls in committed turns
	pending       []string       // fingerprints of the current turn's calls
	inflight      map[string]int // fingerprint -> calls running now
	elem          *list.Element
	gone          bool // evicted or ended: calls finishing now record nothing
}

// NewDedupe returns duplicate detection configured by cfg.
func NewDedupe(cfg DedupeOptions) (*Dedupe, error) {
	d := &Dedupe{
		keys:  cfg.Keys,
		max:   maxDedupeNamespaces,
		tasks: map[string]map[string]*dedupeSpace{},
		lru:   list.New(),
	}
	if d.keys == nil {
		d.keys = DefaultDedupeKeys()
	}
	var err error
	if d.policy, err = dedupePolicy(cfg.Policy, dedupeWarn); err != nil {
		return nil, fmt.Errorf("dedupe: %w", err)
	}
	for i, t := range cfg.Tools {
		p, err := toolglob.Parse(t.Tools, true)
		if err != nil {
			return nil, fmt.Errorf("dedupe: tools[%d]: %w", i, err)
		}
		pol, err := dedupePolicy(t.Policy, "")
		if err != nil {
			return nil, fmt.Errorf("dedupe: tools[%d] (%s): %w", i, t.Tools, err)
		}
		d.tools = append(d.tools, dedupeTool{tools: p, keys: t.Keys, policy: pol})
	}
	return d, nil
}

func dedupePolicy(s, def string) (string, error) {
	switch s = strings.ToLower(strings.TrimSpace(s)); s {
	case "":
		return def, nil
	case dedupeAllow, dedupeWarn, dedupeReject:
		return s, nil
	}
	return "", fmt.Errorf("policy %q: want allow, warn or reject", s)
}

// settings returns the keys and policy for a tool.
func (d *Dedupe) settings(server, name string) ([]string, string) {
	for _, t := range d.tools {
		if t.tools.Match(server, name) {
			keys, policy := t.keys, t.policy
			if keys == nil {
				keys = d.keys
			}
			if policy == "" {
				policy = d.policy
			}
			return keys, policy
		}
	}
	return d.keys, d.policy
}

// Fingerprint returns the call's fingerprint and whether it has one: a
// hash of the server, the tool and the normalised values of the key
// arguments present. A call with none of the key arguments has none.
func (d *Dedupe) Fingerprint(call tool.Call) (string, bool) {
	keys, _ := d.settings(call.Server, call.Tool)
	return fingerprint(call, keys)
}

func fingerprint(call tool.Call, keys []string) (string, bool) {
	pairs := presentKeys(call.Arguments, keys)
	if len(pairs) == 0 {
		return "", false
	}
	// A JSON array of strings is an unambiguous encoding of the list.
	list := make([]string, 0, 2+2*len(pairs))
	list = append(list, call.Server, call.Tool)
	for _, k := range pairs {
		list = append(list, k, normalizeDedupeValue(call.Arguments[k]))
	}
	b, err := json.Marshal(list)
	if err != nil {
		return "", false // cannot happen for strings
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), true
}

// presentKeys returns the keys whose arguments are present (and not null),
// sorted and without repeats.
func presentKeys(args map[string]any, keys []string) []string {
	var out []string
	for _, k := range keys {
		if v, ok := args[k]; ok && v != nil && !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// normalizeDedupeValue is the form of an argument value fingerprints use:
// http(s) URLs canonical, other text normalised, numbers and booleans as
// JSON, anything else as canonical JSON (keys sorted). Each form is
// tagged with its type, so the text "1" and the number 1 differ.
func normalizeDedupeValue(v any) string {
	switch x := v.(type) {
	case string:
		if u, ok := CanonicalURL(x); ok {
			return "u:" + u
		}
		return "s:" + NormalizeText(x)
	case bool:
		return "j:" + strconv.FormatBool(x)
	}
	b, err := json.Marshal(canonicalJSONValue(v))
	if err != nil {
		return "g:" + fmt.Sprint(v)
	}
	return "j:" + string(b)
}

// canonicalJSONValue rewrites json.Number values as float64 values, so an
// argument decoded with UseNumber fingerprints like one decoded without
// (encoding/json sorts map keys itself).
func canonicalJSONValue(v any) any {
	switch x := v.(type) {
	case json.Number:
		if f, err := x.Float64(); err == nil {
			return f
		}
		return x.String()
	case float64:
		if math.IsInf(x, 0) || math.IsNaN(x) {
			return fmt.Sprint(x)
		}
		return x
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = canonicalJSONValue(e)
		}
		return m
	case []any:
		s := make([]any, len(x))
		for i, e := range x {
			s[i] = canonicalJSONValue(e)
		}
		return s
	}
	return v
}

// describeQuery shows the key arguments of a call in messages:
// google_search q="rust mcp".
func describeQuery(call tool.Call, keys []string) string {
	var b strings.Builder
	b.WriteString(call.Tool)
	for _, k := range presentKeys(call.Arguments, keys) {
		var s string
		if str, ok := call.Arguments[k].(string); ok {
			s = strconv.Quote(shorten(str, 100))
		} else if j, err := json.Marshal(call.Arguments[k]); err == nil {
			s = shorten(string(j), 100)
		} else {
			s = fmt.Sprint(call.Arguments[k])
		}
		b.WriteString(" ")
		b.WriteString(k)
		b.WriteString("=")
		b.WriteString(s)
	}
	return b.String()
}

// Middleware checks each call against the queries already made in its task
// and session, applying the tool's policy: "allow" lets it through, "warn"
// lets it through and appends a warning to its result, "reject" refuses it
// with duplicate_query. A call is remembered only when it ran and
// succeeded: a failed call may be retried. Calls still running count too,
// so of the same query sent several times at once, with "reject", one
// runs; if that one fails, the others were refused all the same.
func (d *Dedupe) Middleware(next Handler) Handler {
	return HandlerFunc(func(ctx context.Context, call tool.Call) *tool.Record {
		if call.Task == "" {
			return next.Call(ctx, call)
		}
		keys, policy := d.settings(call.Server, call.Tool)
		if policy == dedupeAllow {
			return next.Call(ctx, call)
		}
		fp, ok := fingerprint(call, keys)
		if !ok {
			return next.Call(ctx, call)
		}
		sp, count := d.begin(call.Task, call.Session, fp)
		if count > 0 && policy == dedupeReject {
			d.finish(sp, fp, false)
			msg := fmt.Sprintf("the same query (%s) was already made %d time(s) in this task; use the earlier result or change the query",
				describeQuery(call, keys), count)
			rec := refuse(call, &tool.Error{Kind: tool.KindDuplicateQuery, Message: msg})
			rec.Note("dedupe", msg, map[string]any{"fingerprint": fp, "count": count, "policy": dedupeReject})
			return rec
		}
		rec := next.Call(ctx, call)
		d.finish(sp, fp, rec != nil && rec.Error == nil)
		if count > 0 && policy == dedupeWarn && rec != nil {
			warning := fmt.Sprintf("[toolmux] This query was already made %d time(s) in this task; consider using the earlier result or changing the query.", count)
			if rec.Result != nil {
				res := *rec.Result
				res.Content = append(slices.Clip(res.Content), tool.Content{Type: tool.ContentText, Text: warning})
				rec.Result = &res
			}
			rec.Note("dedupe", fmt.Sprintf("repeated query (%s), made %d time(s) before", describeQuery(call, keys), count),
				map[string]any{"fingerprint": fp, "count": count, "policy": dedupeWarn})
		}
		return rec
	})
}

// begin counts the earlier calls with fingerprint fp in (task, session) —
// committed, in the current turn, and running now — and marks this one as
// running.
func (d *Dedupe) begin(task, session, fp string) (*dedupeSpace, int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	sp := d.space(task, session, true)
	count := sp.committed[fp] + sp.inflight[fp]
	for _, p := range sp.pending {
		if p == fp {
			count++
		}
	}
	sp.inflight[fp]++
	return sp, count
}

// finish ends a running call, adding it to the current turn if it succeeded.
func (d *Dedupe) finish(sp *dedupeSpace, fp string, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if sp.inflight[fp]--; sp.inflight[fp] <= 0 {
		delete(sp.inflight, fp)
	}
	if ok && !sp.gone {
		sp.pending = append(sp.pending, fp)
	}
}

// space returns the state of (task, session), creating it if asked, and
// marks it as recently used. d.mu is held.
func (d *Dedupe) space(task, session string, create bool) *dedupeSpace {
	if sp := d.tasks[task][session]; sp != nil {
		d.lru.MoveToFront(sp.elem)
		return sp
	}
	if !create {
		return nil
	}
	for d.lru.Len() >= d.max && d.lru.Len() > 0 {
		d.drop(d.lru.Back().Value.(*dedupeSpace))
	}
	sp := &dedupeSpace{task: task, session: session, committed: map[string]int{}, inflight: map[string]int{}}
	sp.elem = d.lru.PushFront(sp)
	sessions := d.tasks[task]
	if sessions == nil {
		sessions = map[string]*dedupeSpace{}
		d.tasks[task] = sessions
	}
	sessions[session] = sp
	return sp
}

// drop forgets one namespace. d.mu is held.
func (d *Dedupe) drop(sp *dedupeSpace) {
	sp.gone = true
	d.lru.Remove(sp.elem)
	if sessions := d.tasks[sp.task]; sessions != nil {
		delete(sessions, sp.session)
		if len(sessions) == 0 {
			delete(d.tasks, sp.task)
		}
	}
}

// Commit records that the caller committed the turn of (task, session):
// the queries of the turn count from now on, whatever happens to later
// turns. With nothing pending it does nothing.
func (d *Dedupe) Commit(task, session string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	sp := d.space(task, session, false)
	if sp == nil || len(sp.pending) == 0 {
		return
	}
	for _, fp := range sp.pending {
		sp.committed[fp]++
	}
	sp.pending = nil
}

// Discard records that the caller rolled back the turn of (task, session):
// its queries are forgotten; those of committed turns still count.
func (d *Dedupe) Discard(task, session string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if sp := d.space(task, session, false); sp != nil {
		sp.pending = nil
	}
}

// EndTask forgets everything about a task, in every session.
func (d *Dedupe) EndTask(task string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, sp := range d.tasks[task] {
		d.drop(sp)
	}
}
