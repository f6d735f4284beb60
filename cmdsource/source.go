// Package cmdsource is a toolmux source whose tools are discovered by
// running a command, the protocol of Gemini CLI's toolDiscoveryCommand and
// toolCallCommand:
//
//   - the discovery command prints a JSON array of function declarations
//     ({name, description, parameters | parametersJsonSchema}) or of groups
//     of them ({functionDeclarations: [...]}, also spelled
//     function_declarations), or one such group;
//   - a call runs the call command with the tool's name appended as its
//     last argument and the arguments as a JSON object on stdin; exit status
//     0 means success and stdout is the result.
//
// Commands are argument vectors run directly, without a shell: to use a
// shell line, configure ["sh", "-c", "LINE"] (the tool name then arrives as
// $0 of the line, so write ["sh", "-c", "LINE", "sh"] to get it as $1).
// Every run has a process group of its own, which is killed when the
// command exits, when its time is up, when the caller cancels and when the
// source is closed, so nothing a command starts outlives it.
//
// docs/discovery.md describes the protocol for authors of such commands.
package cmdsource

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/toolmux/toolmux/internal/procgroup"
	"github.com/toolmux/toolmux/tool"
)

// Transport is how health reports name this kind of source.
const Transport = "command"

// Defaults.
const (
	DefaultDiscoverTimeout = 30 * time.Second
	DefaultCallTimeout     = 10 * time.Minute
	DefaultMaxOutput       = 1 << 20
	DefaultKillGrace       = 2 * time.Second
)

// Config describes one command-discovered server.
type Config struct {
	// Name is the server's name in toolmux (the "server" of server__tool),
	// such as "discovered".
	Name string
	// Discover is the argument vector of the discovery command. It is run
	// directly, not by a shell; use {"sh", "-c", "LINE"} for a shell line. A
	// relative program path ("./tools.sh") is relative to Dir.
	Discover []string
	// Call is the argument vector of the call command; the tool's name is
	// appended to it for every call.
	Call []string
	// Dir is the working directory of both commands; empty means toolmux's.
	Dir string
	// Env holds KEY=VALUE entries added to toolmux's own environment (and
	// overriding it) for both commands.
	Env []string
	// DiscoverTimeout bounds one run of the discovery command; default 30
	// seconds. The caller's context may end it sooner (the manager bounds
	// discovery by its connect timeout).
	DiscoverTimeout time.Duration
	// CallTimeout bounds one call; default 10 minutes. The caller's context
	// may end it sooner (the manager applies its own call timeout).
	CallTimeout time.Duration
	// MaxOutput is how much of each of stdout and stderr is kept; default 1
	// MiB each. The start of stdout is kept, the end of stderr. Output past
	// the limit is read and dropped, so the command never blocks on it.
	MaxOutput int
	// KillGrace is how long a command that must stop is given between
	// SIGTERM and SIGKILL; default 2 seconds.
	KillGrace time.Duration
	// Logger receives warnings (declarations ignored as duplicates); nil
	// discards them.
	Logger *slog.Logger
}

// Source is a toolmux source backed by a discovery command and a call
// command. It is safe for concurrent use.
type Source struct {
	cfg Config
	log *slog.Logger

	// closing is cancelled by Close, which ends every running command.
	closing context.Context
	stopAll context.CancelFunc
	wg      sync.WaitGroup // running commands

	mu      sync.Mutex
	closed  bool
	tools   []tool.Tool          // from the last successful discovery
	byName  map[string]tool.Tool // the same, by name
	listed  bool                 // a discovery succeeded
	lastErr *tool.Error          // how the last discovery failed, if it did
	errAt   time.Time
	started uint64 // counts discoveries started
	applied uint64 // the discovery whose outcome is recorded
}

// New checks cfg and returns a source. It runs nothing: the first Tools
// or Call runs the discovery command.
func New(cfg Config) (*Source, error) {
	if strings.TrimSpace(cfg.Name) == "" {
		return nil, errors.New("cmdsource: a server needs a name")
	}
	if err := checkArgv(cfg.Discover); err != nil {
		return nil, fmt.Errorf("cmdsource: server %q: discovery command: %w", cfg.Name, err)
	}
	if err := checkArgv(cfg.Call); err != nil {
		return nil, fmt.Errorf("cmdsource: server %q: call command: %w", cfg.Name, err)
	}
	if strings.ContainsRune(cfg.Dir, 0) {
		return nil, fmt.Errorf("cmdsource: server %q: the directory contains a NUL byte", cfg.Name)
	}
	for i, kv := range cfg.Env {
		k, _, ok := strings.Cut(kv, "=")
		switch {
		case !ok:
			return nil, fmt.Errorf("cmdsource: server %q: environment entry %d (%q) is not KEY=VALUE", cfg.Name, i, kv)
		case k == "":
			return nil, fmt.Errorf("cmdsource: server %q: environment entry %d (%q) has an empty name", cfg.Name, i, kv)
		case strings.ContainsRune(kv, 0):
			return nil, fmt.Errorf("cmdsource: server %q: environment entry %d contains a NUL byte", cfg.Name, i)
		}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"discover timeout", cfg.DiscoverTimeout}, {"call timeout", cfg.CallTimeout}, {"kill grace", cfg.KillGrace}} {
		if d.v < 0 {
			return nil, fmt.Errorf("cmdsource: server %q: the %s is negative (%s)", cfg.Name, d.name, d.v)
		}
	}
	if cfg.MaxOutput < 0 {
		return nil, fmt.Errorf("cmdsource: server %q: the output limit is negative (%d)", cfg.Name, cfg.MaxOutput)
	}
	if cfg.DiscoverTimeout == 0 {
		cfg.DiscoverTimeout = DefaultDiscoverTimeout
	}
	if cfg.CallTimeout == 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	if cfg.MaxOutput == 0 {
		cfg.MaxOutput = DefaultMaxOutput
	}
	if cfg.KillGrace == 0 {
		cfg.KillGrace = DefaultKillGrace
	}
	cfg.Discover, cfg.Call, cfg.Env = slices.Clone(cfg.Discover), slices.Clone(cfg.Call), slices.Clone(cfg.Env)
	s := &Source{cfg: cfg, log: cfg.Logger}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.closing, s.stopAll = context.WithCancel(context.Background())
	return s, nil
}

func checkArgv(argv []string) error {
	switch {
	case len(argv) == 0:
		return errors.New("no command given (want an argument vector such as [\"./tools.sh\", \"discover\"], or [\"sh\", \"-c\", \"LINE\"] for a shell line)")
	case strings.TrimSpace(argv[0]) == "":
		return errors.New("the program (first element) is empty")
	}
	for i, a := range argv {
		if strings.ContainsRune(a, 0) {
			return fmt.Errorf("argument %d contains a NUL byte", i)
		}
	}
	return nil
}

// Name returns the server's name.
func (s *Source) Name() string { return s.cfg.Name }

// Transport returns "command".
func (s *Source) Transport() string { return Transport }

// Tools runs the discovery command and returns the tools it declares, in
// the order declared. It runs the command on every call: the manager calls
// Tools only to list a server for the first time, on Refresh, and to retry
// a failed discovery, and caches the catalog in between. The list is kept
// for Call; a failed discovery keeps the previous list.
//
// A declaration without a name (or otherwise invalid) fails the discovery
// with an error naming its position; a name declared twice keeps its first
// declaration and logs a warning about the others.
func (s *Source) Tools(ctx context.Context) ([]tool.Tool, error) {
	tools, err := s.discover(ctx)
	if err != nil {
		return nil, err
	}
	return slices.Clone(tools), nil
}

// discover runs the discovery command and records its outcome, unless a
// discovery started later has already recorded one. A run the caller gave
// up on is not recorded: it says nothing about the command.
func (s *Source) discover(ctx context.Context) ([]tool.Tool, error) {
	s.mu.Lock()
	s.started++
	seq := s.started
	s.mu.Unlock()

	tools, warnings, err := s.runDiscovery(ctx)

	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range warnings {
		s.log.Warn("discovery: duplicate tool declaration ignored", "server", s.cfg.Name, "problem", w)
	}
	if err != nil {
		var te *tool.Error
		if ctx.Err() == nil && errors.As(err, &te) && !errors.Is(err, errClosing) && seq > s.applied {
			s.applied, s.lastErr, s.errAt = seq, te, time.Now()
		}
		return nil, err
	}
	if seq > s.applied {
		s.applied, s.tools, s.listed, s.lastErr = seq, tools, true, nil
		s.byName = make(map[string]tool.Tool, len(tools))
		for _, t := range tools {
			s.byName[t.Name] = t
		}
	}
	return tools, nil
}

// runDiscovery runs the discovery command once and parses what it printed.
func (s *Source) runDiscovery(ctx context.Context) ([]tool.Tool, []string, error) {
	dctx, cancel := context.WithTimeout(ctx, s.cfg.DiscoverTimeout)
	defer cancel()
	argv := s.cfg.Discover
	line := commandLine(argv)
	fail := func(out *output, cause error, format string, args ...any) *tool.Error {
		e := &tool.Error{Kind: tool.KindServerUnavailable, Server: s.cfg.Name,
			Message: fmt.Sprintf("discovery command `%s` ", line) + fmt.Sprintf(format, args...),
			Err:     &CommandError{Argv: slices.Clone(argv), ExitCode: -1, Err: cause}}
		if out != nil {
			e.Detail = quoteOutput(out)
			e.Err.(*CommandError).fill(out)
		}
		return e
	}

	out, stopped, err := s.run(dctx, argv, nil)
	switch {
	case errors.Is(err, errClosing):
		return nil, nil, s.closedError("", err)
	case err != nil:
		return nil, nil, fail(nil, err, "could not be started: %v", err)
	case stopped != nil && ctx.Err() != nil:
		return nil, nil, ctx.Err()
	case errors.Is(stopped, errClosing):
		return nil, nil, s.closedError("", stopped)
	case stopped != nil:
		e := fail(out, context.DeadlineExceeded, "did not finish within %s and was killed", s.cfg.DiscoverTimeout)
		e.Err.(*CommandError).TimedOut = true
		return nil, nil, e
	case out.signal != 0:
		return nil, nil, fail(out, nil, "was killed by %s", procgroup.SignalName(out.signal))
	case out.code != 0:
		return nil, nil, fail(out, nil, "exited with status %d", out.code)
	case out.truncated():
		return nil, nil, fail(out, errors.New("output over the limit"), "printed %d bytes, more than the limit of %d", out.stdoutTotal, s.cfg.MaxOutput)
	}
	decls, warnings, err := parseDeclarations(out.stdout)
	if err != nil {
		var de *DeclarationError
		if errors.As(err, &de) {
			return nil, warnings, fail(out, err, "printed %v", err)
		}
		return nil, warnings, fail(out, err, "printed unusable output: %v", err)
	}
	tools := make([]tool.Tool, len(decls))
	for i, d := range decls {
		tools[i] = tool.Tool{
			Server:      s.cfg.Name,
			Name:        d.name,
			Exposed:     tool.ExposedName(s.cfg.Name, d.name),
			Description: d.description,
			InputSchema: d.schema,
		}
	}
	return tools, warnings, nil
}

// Call runs the call command for one tool: the tool's name is appended to
// its arguments and args, as a JSON object, is written to its stdin. Exit
// status 0 is success, and stdout the result: its text, plus its
// structured content when stdout is a JSON object. A non-zero exit status
// is a tool_error, death by a signal an execution_failed error; both quote
// stdout and stderr. When ctx ends first, the command's process group is
// killed and ctx.Err() returned.
//
// The tool must be in the list of the last successful discovery, which
// Call runs first when there has been none.
func (s *Source) Call(ctx context.Context, name string, args map[string]any) (*tool.Result, error) {
	s.mu.Lock()
	listed, closed := s.listed, s.closed
	s.mu.Unlock()
	if closed {
		return nil, s.closedError(name, tool.ErrNotSent)
	}
	if !listed {
		if _, err := s.discover(ctx); err != nil {
			return nil, err
		}
	}
	s.mu.Lock()
	_, known := s.byName[name]
	names := make([]string, 0, len(s.tools))
	if !known {
		for _, t := range s.tools {
			names = append(names, t.Name)
		}
	}
	s.mu.Unlock()
	if !known {
		return nil, &tool.Error{Kind: tool.KindToolNotRegistered, Server: s.cfg.Name, Tool: name,
			Message:    fmt.Sprintf("server %s has no tool named %q", s.cfg.Name, name),
			Suggestion: tool.Closest(name, names)}
	}

	if args == nil {
		args = map[string]any{}
	}
	stdin, err := encodeArgs(args)
	if err != nil {
		return nil, &tool.Error{Kind: tool.KindInvalidParams, Server: s.cfg.Name, Tool: name, Err: err,
			Message: fmt.Sprintf("the arguments cannot be written as JSON: %v", err)}
	}

	cctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
	defer cancel()
	argv := append(slices.Clone(s.cfg.Call), name)
	line := commandLine(argv)
	fail := func(kind tool.Kind, out *output, cause error, format string, a ...any) *tool.Error {
		ce := &CommandError{Argv: argv, ExitCode: -1, Err: cause}
		e := &tool.Error{Kind: kind, Server: s.cfg.Name, Tool: name, Err: ce,
			Message: fmt.Sprintf("call command `%s` ", line) + fmt.Sprintf(format, a...)}
		if out != nil {
			ce.fill(out)
			e.Detail = quoteOutput(out)
		}
		return e
	}

	out, stopped, err := s.run(cctx, argv, stdin)
	switch {
	case errors.Is(err, errClosing):
		return nil, s.closedError(name, errors.Join(err, tool.ErrNotSent))
	case err != nil:
		// Nothing ran, so the call is safe to repeat; a call command that
		// cannot start is a server that is down.
		return nil, fail(tool.KindServerUnavailable, nil, errors.Join(err, tool.ErrNotSent), "could not be started: %v", err)
	case stopped != nil && ctx.Err() != nil:
		return nil, ctx.Err()
	case errors.Is(stopped, errClosing):
		return nil, s.closedError(name, stopped)
	case stopped != nil:
		e := fail(tool.KindTimeout, out, context.DeadlineExceeded, "did not finish within %s and was killed", s.cfg.CallTimeout)
		e.Err.(*CommandError).TimedOut = true
		return nil, e
	case out.signal != 0:
		return nil, fail(tool.KindExecutionFailed, out, nil, "was killed by %s", procgroup.SignalName(out.signal))
	case out.code != 0:
		return nil, fail(tool.KindToolError, out, nil, "exited with status %d", out.code)
	}
	return result(out, s.cfg.MaxOutput), nil
}

// encodeArgs writes the arguments as JSON on one line, ended by a newline,
// without json.Marshal's HTML escaping: "a<b" arrives as typed, not as
// "a\u003cb", which a script picking fields out with sed would not undo.
func encodeArgs(args map[string]any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(args); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// result turns the stdout of a successful call into a result. Only a JSON
// object becomes structured content: MCP requires structuredContent to be
// an object, and clients reject results where it is not. An array is still
// there in the text.
func result(out *output, limit int) *tool.Result {
	text := string(out.stdout)
	if out.truncated() {
		return tool.TextResult(text + fmt.Sprintf("\n[toolmux: output cut at %d of %d bytes]", limit, out.stdoutTotal))
	}
	res := tool.TextResult(text)
	if trimmed := strings.TrimSpace(text); strings.HasPrefix(trimmed, "{") {
		var obj map[string]any
		if json.Unmarshal([]byte(trimmed), &obj) == nil && obj != nil {
			res.Structured = obj
		}
	}
	return res
}

// closedError is the error of a call or discovery refused or stopped by
// Close.
func (s *Source) closedError(name string, cause error) *tool.Error {
	return &tool.Error{Kind: tool.KindServerUnavailable, Server: s.cfg.Name, Tool: name, Err: cause,
		Message: fmt.Sprintf("server %s is closed", s.cfg.Name)}
}

// track registers a command about to run, unless the source is closed.
func (s *Source) track() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosing
	}
	s.wg.Add(1)
	return nil
}

// Health reports the outcome of the last discovery: connecting before the
// first one ends, ready after a success, failed after a failure (with the
// error and the quoted output), and degraded after a failure that followed
// a success, since calls still go to the tools listed then.
func (s *Source) Health() tool.ServerHealth {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := tool.ServerHealth{Name: s.cfg.Name, Transport: Transport, Tools: len(s.tools)}
	switch {
	case s.lastErr != nil:
		h.State = tool.StateFailed
		if s.listed {
			h.State = tool.StateDegraded
		}
		h.Error, h.Detail, h.ErrorAt = s.lastErr.Message, s.lastErr.Detail, s.errAt
	case s.listed:
		h.State = tool.StateReady
	default:
		h.State = tool.StateConnecting
	}
	return h
}

// Close ends every running command (SIGTERM to its group, SIGKILL after
// KillGrace), waits for them, and refuses further calls. It is safe to call
// more than once.
func (s *Source) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.stopAll()
	s.wg.Wait()
	return nil
}

// CommandError is the cause (the Err) of the *tool.Error of a command that
// did not succeed: it could not start, exited with a non-zero status, was
// killed by a signal, or ran out of time.
type CommandError struct {
	// Argv is the command that ran, the tool name included for calls.
	Argv []string
	// ExitCode is the exit status, or -1 when the command was killed by a
	// signal or did not run.
	ExitCode int
	// Signal names the signal that killed it ("SIGKILL"), if one did.
	Signal string
	// TimedOut reports that it was killed for running too long.
	TimedOut bool
	// Stdout and Stderr are the start of stdout and the end of stderr, each
	// at most MaxOutput bytes.
	Stdout, Stderr string
	// Err is the underlying cause: why it could not start, or
	// context.DeadlineExceeded, or a *DeclarationError.
	Err error
}

func (e *CommandError) fill(out *output) {
	e.ExitCode = out.code
	if out.signal != 0 {
		e.Signal = procgroup.SignalName(out.signal)
	}
	e.Stdout, e.Stderr = string(out.stdout), string(out.stderr)
}

// Error says how the command ended.
func (e *CommandError) Error() string {
	line := commandLine(e.Argv)
	switch {
	case e.TimedOut:
		return fmt.Sprintf("command `%s` ran out of time", line)
	case e.Signal != "":
		return fmt.Sprintf("command `%s` was killed by %s", line, e.Signal)
	case e.Err != nil:
		return fmt.Sprintf("command `%s`: %v", line, e.Err)
	default:
		return fmt.Sprintf("command `%s` exited with status %d", line, e.ExitCode)
	}
}

// Unwrap returns the cause.
func (e *CommandError) Unwrap() error { return e.Err }
