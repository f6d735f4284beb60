package pipeline

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/toolmux/toolmux/internal/toolglob"
	"github.com/toolmux/toolmux/tool"
)

// rollbackRule is one parsed rule: a tool filter, one condition and a reason.
type rollbackRule struct {
	tools  []toolglob.Pattern
	match  func(rec *tool.Record) bool
	reason string
}

// NewRollback returns the middleware that sets every record's verdict: the
// first rule that matches advises rolling the turn back, with its reason.
// It never rolls anything back itself.
func NewRollback(cfg RollbackOptions) (Middleware, error) {
	step, err := newRollback(cfg)
	if err != nil {
		return nil, err
	}
	return afterMiddleware(step), nil
}

// newRollback returns the rollback middleware's step after the call.
func newRollback(cfg RollbackOptions) (afterFunc, error) {
	rules := cfg.Rules
	if rules == nil {
		rules = DefaultRollbackRules()
	}
	parsed := make([]rollbackRule, 0, len(rules))
	for i, r := range rules {
		pr, err := parseRollbackRule(r)
		if err != nil {
			return nil, fmt.Errorf("rollback rule %d: %w", i, err)
		}
		parsed = append(parsed, pr)
	}
	return func(_ context.Context, _ tool.Call, rec *tool.Record) *tool.Record {
		rec.Verdict = &tool.Verdict{}
		for _, r := range parsed {
			if len(r.tools) > 0 {
				if _, ok := toolglob.Any(r.tools, rec.Server, rec.Tool); !ok {
					continue
				}
			}
			if r.match(rec) {
				rec.Verdict = &tool.Verdict{Rollback: true, Reason: r.reason}
				rec.Note("rollback", "advises rolling the turn back: "+r.reason, nil)
				break
			}
		}
		return rec
	}, nil
}

func parseRollbackRule(r RollbackRule) (rollbackRule, error) {
	tools, err := toolglob.ParseAll(r.Tools, true)
	if err != nil {
		return rollbackRule{}, err
	}
	out := rollbackRule{tools: tools, reason: r.Reason}
	switch {
	case r.Prefix != "":
		prefix := r.Prefix
		out.match = func(rec *tool.Record) bool { return strings.HasPrefix(outcomeText(rec), prefix) }
		out.reason = or(out.reason, fmt.Sprintf("the result starts with %q", prefix))
	case r.IsError:
		out.match = func(rec *tool.Record) bool {
			return rec.Result != nil && rec.Result.IsError || tool.KindOf(rec.Err()) == tool.KindToolError
		}
		out.reason = or(out.reason, "the tool reported an error")
	case r.JSONEmpty != "":
		path := strings.Split(r.JSONEmpty, ".")
		out.match = func(rec *tool.Record) bool { return rec.Error == nil && jsonEmptyAt(rec.Result, path) }
		out.reason = or(out.reason, fmt.Sprintf("the result's %s is empty", r.JSONEmpty))
	case len(r.Kinds) > 0:
		kinds := slices.Clone(r.Kinds)
		out.match = func(rec *tool.Record) bool {
			if rec.Error != nil && slices.Contains(kinds, string(rec.Error.Kind)) {
				return true
			}
			// A duplicate let through with a warning is still a duplicate.
			return slices.Contains(kinds, string(tool.KindDuplicateQuery)) && warnedDuplicate(rec)
		}
		out.reason = or(out.reason, "the call failed with "+strings.Join(kinds, " or "))
	default:
		return rollbackRule{}, fmt.Errorf("no condition (set prefix, is_error, json_empty or kinds)")
	}
	return out, nil
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// outcomeText is what a prefix rule looks at: the result text, or the error
// message when there is no result (the seed system matched "Error executing
// tool" on either).
func outcomeText(rec *tool.Record) string {
	if rec.Result != nil {
		return strings.TrimSpace(textView(rec.Result))
	}
	if rec.Error != nil {
		return strings.TrimSpace(rec.Error.Message)
	}
	return ""
}

func warnedDuplicate(rec *tool.Record) bool {
	for _, n := range rec.Notes {
		if n.Layer == "dedupe" && n.Data["policy"] == "warn" {
			return true
		}
	}
	return false
}

// jsonEmptyAt reports whether the value at path in a JSON result is
// missing, null or empty. The structured content is used when present,
// else the text is parsed; a result that is not JSON never matches.
func jsonEmptyAt(res *tool.Result, path []string) bool {
	if res == nil {
		return false
	}
	v := res.Structured
	if v == nil {
		if err := json.Unmarshal([]byte(strings.TrimSpace(textView(res))), &v); err != nil {
			return false
		}
	}
	for _, key := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return true
		}
		if v, ok = m[key]; !ok {
			return true
		}
	}
	switch x := v.(type) {
	case nil:
		return true
	case string:
		return x == ""
	case []any:
		return len(x) == 0
	case map[string]any:
		return len(x) == 0
	}
	return false
}
