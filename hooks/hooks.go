// Package hooks runs Claude Code's hooks around toolmux's tool calls:
// commands that read a JSON description of the call on stdin and answer
// in JSON (or by their exit code), configured in the same shape as the
// `hooks` object of Claude Code's settings, and guardrail webhooks, asked
// the same question over HTTP (docs/hooks.md).
//
// A PreToolUse hook decides before a call: allow (no approval question),
// deny (the call refused as policy_violation), ask (the policy's approval
// path), and may rewrite the arguments (updatedInput). That decision is
// taken where approvals are decided: [Gate] wraps the policy gate as the
// scheduler's gate, so that a hook's "ask" reaches the same approver as a
// rule's, a hook's "allow" skips only the question (a policy deny still
// refuses), and the rewritten arguments are the ones the policy judges,
// the approver is shown, and the pipeline repairs and validates. A
// PostToolUse hook judges the result: [Hooks.Middleware], innermost of the
// pipeline, adds its context for the model or replaces the result by an
// error naming the hook, before the result is truncated and recorded.
//
// A hook that fails (cannot start, crashes, times out, prints more than
// the bound, answers what is not JSON) never takes the gateway down: by
// default the call goes on with a note, as Claude Code's non-blocking
// errors (OnError). A guardrail that cannot be asked lets the call go on
// or refuses it by its own Fail setting.
package hooks

import (
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/toolmux/toolmux/tool"
)

// The events toolmux runs hooks for: Claude Code's names.
const (
	PreToolUse  = "PreToolUse"
	PostToolUse = "PostToolUse"
)

// Defaults of the package's bounds.
const (
	// DefaultTimeout is a command hook's timeout when it gives none:
	// Claude Code's 60 seconds.
	DefaultTimeout = 60 * time.Second
	// DefaultMaxTimeout bounds the timeout a hook may ask for.
	DefaultMaxTimeout = 10 * time.Minute
	// DefaultMaxOutputBytes bounds what is read of a hook's stdout and of
	// its stderr, and of a guardrail's answer.
	DefaultMaxOutputBytes = 1 << 20
	// DefaultGuardrailTimeout is a guardrail's timeout when it gives none.
	DefaultGuardrailTimeout = 10 * time.Second
)

// OnError says what a hook's failure does to the call.
type OnError string

const (
	// Continue: the call goes on, with a note naming the hook and its
	// failure (Claude Code's non-blocking error). The default.
	Continue OnError = "continue"
	// Block: the call is refused (PreToolUse) or its result replaced by
	// an error (PostToolUse), naming the hook and its failure.
	Block OnError = "block"
)

// Fail says what a guardrail that cannot be asked does to the call.
type Fail string

const (
	// FailOpen: the call goes on with a note. The default.
	FailOpen Fail = "open"
	// FailClosed: the call is refused (or its result replaced), with an
	// error naming the guardrail.
	FailClosed Fail = "closed"
)

// Command is one command hook: run with `sh -c`.
type Command struct {
	Command string
	// Timeout is how long it may run (0: DefaultTimeout), at most
	// Options.MaxTimeout.
	Timeout time.Duration
}

// Matcher is a group of hooks run for the tools its pattern matches:
// Claude Code's matcher, applied to toolmux's exposed tool names
// (server__tool). "" and "*" match every tool; a pattern of letters,
// digits, underscores and "|" is a list of exact names; anything else is
// a regular expression found anywhere in the name.
type Matcher struct {
	Matcher string
	Hooks   []Command
}

// Guardrail is a webhook asked the hooks' question over HTTP: the hook's
// stdin JSON POSTed, the hook's JSON answer read from a 2xx response.
type Guardrail struct {
	Name string
	URL  string
	// Events are the events it is asked about (nil: both).
	Events []string
	// Matcher selects tools as a Matcher's does.
	Matcher string
	// Timeout bounds one request (0: DefaultGuardrailTimeout), at most
	// Options.MaxTimeout.
	Timeout time.Duration
	// MaxResponseBytes bounds the answer read (0: Options.MaxOutputBytes).
	MaxResponseBytes int
	// Fail is what a guardrail that is down, times out or answers badly
	// does (FailOpen by default).
	Fail Fail
	// Headers are sent with every request (an Authorization header with a
	// token from the environment); never logged nor recorded.
	Headers map[string]string
}

// Options configure Hooks.
type Options struct {
	PreToolUse  []Matcher
	PostToolUse []Matcher
	Guardrails  []Guardrail
	// MaxTimeout bounds every hook's and guardrail's timeout.
	MaxTimeout time.Duration
	// MaxOutputBytes bounds what is read of a command's stdout and of its
	// stderr; one more byte is a failure of kind output_too_large.
	MaxOutputBytes int
	// OnError is what a failing command hook does (Continue by default).
	OnError OnError
	// Dir is the commands' working directory, the input's cwd and their
	// CLAUDE_PROJECT_DIR, as Claude Code's project directory ("": the
	// process's working directory).
	Dir string
	// Client makes the guardrails' requests (nil: a client of its own,
	// which follows no redirect).
	Client *http.Client
}

func (o Options) withDefaults() Options {
	if o.MaxTimeout <= 0 {
		o.MaxTimeout = DefaultMaxTimeout
	}
	if o.MaxOutputBytes <= 0 {
		o.MaxOutputBytes = DefaultMaxOutputBytes
	}
	if o.OnError == "" {
		o.OnError = Continue
	}
	if o.Dir == "" {
		o.Dir, _ = os.Getwd()
	}
	if o.Client == nil {
		// A guardrail is asked about calls, not sent round the web: a
		// redirect could carry the configured header elsewhere.
		o.Client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	return o
}

// Hooks runs the configured hooks and guardrails. It is safe for
// concurrent use.
type Hooks struct {
	o    Options
	env  []string // the commands' environment
	pre  []matcher
	post []matcher
}

// matcher is a Matcher compiled, or a guardrail as one.
type matcher struct {
	match     func(name string) bool
	commands  []Command
	guardrail *Guardrail
}

// New checks o and returns its Hooks. An invalid matcher, an empty
// command, an unknown event or failure setting is an error naming it.
func New(o Options) (*Hooks, error) {
	o = o.withDefaults()
	// Claude Code's hooks find their scripts by the project's directory
	// ("$CLAUDE_PROJECT_DIR"/.claude/hooks/...): the same here.
	h := &Hooks{o: o, env: append(os.Environ(), "CLAUDE_PROJECT_DIR="+o.Dir)}
	var err error
	if h.pre, err = compile(PreToolUse, o.PreToolUse); err != nil {
		return nil, err
	}
	if h.post, err = compile(PostToolUse, o.PostToolUse); err != nil {
		return nil, err
	}
	switch o.OnError {
	case Continue, Block:
	default:
		return nil, fmt.Errorf("hooks: on_error %q: want continue or block", o.OnError)
	}
	for i := range o.Guardrails {
		g := &o.Guardrails[i]
		if g.Name == "" || g.URL == "" {
			return nil, fmt.Errorf("guardrails[%d]: a guardrail needs a name and a url", i)
		}
		switch g.Fail {
		case "":
			g.Fail = FailOpen
		case FailOpen, FailClosed:
		default:
			return nil, fmt.Errorf("guardrail %s: fail %q: want open or closed", g.Name, g.Fail)
		}
		match, err := compileMatcher(g.Matcher)
		if err != nil {
			return nil, fmt.Errorf("guardrail %s: matcher: %w", g.Name, err)
		}
		events := g.Events
		if len(events) == 0 {
			events = []string{PreToolUse, PostToolUse}
		}
		for _, ev := range events {
			m := matcher{match: match, guardrail: g}
			switch ev {
			case PreToolUse:
				h.pre = append(h.pre, m)
			case PostToolUse:
				h.post = append(h.post, m)
			default:
				return nil, fmt.Errorf("guardrail %s: event %q: want PreToolUse or PostToolUse", g.Name, ev)
			}
		}
	}
	return h, nil
}

func compile(event string, ms []Matcher) ([]matcher, error) {
	out := make([]matcher, 0, len(ms))
	for i, m := range ms {
		match, err := compileMatcher(m.Matcher)
		if err != nil {
			return nil, fmt.Errorf("hooks.%s[%d].matcher: %w", event, i, err)
		}
		for j, c := range m.Hooks {
			if strings.TrimSpace(c.Command) == "" {
				return nil, fmt.Errorf("hooks.%s[%d].hooks[%d]: empty command", event, i, j)
			}
		}
		out = append(out, matcher{match: match, commands: m.Hooks})
	}
	return out, nil
}

// exactList is a matcher Claude Code compares exactly: names and "|".
var exactList = regexp.MustCompile(`^[A-Za-z0-9_|]+$`)

// compileMatcher turns a Claude Code matcher into a test of exposed names.
func compileMatcher(p string) (func(string) bool, error) {
	switch {
	case p == "" || p == "*":
		return func(string) bool { return true }, nil
	case exactList.MatchString(p):
		names := strings.Split(p, "|")
		return func(name string) bool {
			for _, n := range names {
				if n == name {
					return true
				}
			}
			return false
		}, nil
	}
	re, err := regexp.Compile(p)
	if err != nil {
		return nil, err
	}
	return re.MatchString, nil
}

// Active reports whether any hook or guardrail is configured: without,
// the runtime need not wrap its gate nor its pipeline.
func (h *Hooks) Active() bool { return h != nil && (len(h.pre) > 0 || len(h.post) > 0) }

// exposed is the tool's name as hooks see it.
func exposed(call tool.Call) string { return tool.ExposedName(call.Server, call.Tool) }
