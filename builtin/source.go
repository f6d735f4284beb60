// Package builtin is the toolmux source of the built-in tools: the file
// tools list_directory, read_file, glob, grep, write_file and edit, with the
// argument names of Gemini CLI's tools so that models trained on those call
// them correctly; shell, which runs a command; and memory, which keeps facts
// for the rest of a task.
//
// The file tools are confined to one workspace root. A path argument may be
// relative to the root or absolute; anything that resolves outside the
// root, by "..", by an absolute path or through a symbolic link, is refused
// with a path_not_in_workspace error, and every file is opened, created and
// renamed through an [os.Root] so the kernel enforces the same boundary.
// Walks never follow a symbolic link to a directory and skip links that lead
// outside. list_directory, read_file, glob and grep are read-only;
// write_file and edit replace files atomically, so a crash never leaves a
// half-written file.
//
// shell is not confined: only its working directory must be in the
// workspace, and the command can do whatever the user running toolmux can.
// Its annotations (destructive, open world) are what policy and approval
// act on. It runs in its own process group, which is killed as a whole on
// cancellation and timeouts.
//
// memory keeps facts per task (the task of the [tool.Call] in the call's
// context): in memory, or, with [WithMemoryDir], in one JSON-lines file per
// task that survives a restart.
package builtin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/toolmux/toolmux/internal/toolargs"
	"github.com/toolmux/toolmux/tool"
	"github.com/toolmux/toolmux/web"
)

// ServerName is the server name of every built-in tool, and so the prefix
// of their exposed names ("builtin__read_file").
const ServerName = "builtin"

// Defaults of the limits, sized so that one result fits comfortably in a
// model's context window while still covering the common case in one call.
const (
	// DefaultMaxReadBytes bounds the size of a file read_file returns and grep
	// searches: 20 MiB, as in Gemini CLI. Larger files are refused by
	// read_file and skipped by grep.
	DefaultMaxReadBytes int64 = 20 << 20
	// DefaultMaxLines is how many lines read_file returns per call.
	DefaultMaxLines = 2000
	// DefaultMaxLineLength is the length, in characters, beyond which
	// read_file and grep cut a line: minified files would otherwise fill the
	// context with one line.
	DefaultMaxLineLength = 2000
	// DefaultMaxEntries is how many entries list_directory returns.
	DefaultMaxEntries = 1000
	// DefaultMaxFiles is how many paths glob returns.
	DefaultMaxFiles = 1000
	// DefaultMaxMatches is how many matching lines grep returns.
	DefaultMaxMatches = 500
	// DefaultMaxWriteBytes bounds the content write_file writes and the
	// size of a file edit produces: 10 MiB. A model that sends more is
	// almost certainly looping, and the whole content is held in memory.
	DefaultMaxWriteBytes int64 = 10 << 20
	// DefaultShellTimeout is how long a shell command may run when the call
	// gives no timeout_ms.
	DefaultShellTimeout = 10 * time.Minute
	// DefaultShellMaxTimeout is the largest timeout_ms a call may ask for;
	// larger values are lowered to it.
	DefaultShellMaxTimeout = time.Hour
	// DefaultShellInactivityTimeout is how long a shell command may go
	// without writing any output before it is killed: a command waiting for
	// input that will never come (stdin is /dev/null, but some programs
	// open the terminal) or stuck otherwise fails instead of holding the
	// call until the overall timeout.
	DefaultShellInactivityTimeout = 5 * time.Minute
	// DefaultShellMaxOutputBytes is how much of a command's output the
	// result holds: 1 MiB, its first and last halves. The whole output of
	// a longer one is saved to a file in the spill directory.
	DefaultShellMaxOutputBytes = 1 << 20
	// DefaultShellKillGrace is how long a process group has to exit after
	// SIGTERM before it gets SIGKILL.
	DefaultShellKillGrace = 2 * time.Second
	// DefaultMaxFactBytes bounds one fact memory saves: 4 KiB. Facts are
	// notes, not documents; write_file is for those.
	DefaultMaxFactBytes = 4 << 10
	// DefaultMaxFacts is how many facts memory keeps per task, so that a
	// list stays readable and a looping model cannot fill the disk.
	DefaultMaxFacts = 1000
)

// Tool names.
const (
	ListDirectory = "list_directory"
	ReadFile      = "read_file"
	Glob          = "glob"
	Grep          = "grep"
	WriteFile     = "write_file"
	Edit          = "edit"
	Shell         = "shell"
	Memory        = "memory"
)

// limits holds the configured limits and settings.
type limits struct {
	maxReadBytes  int64
	maxLines      int
	maxLineLength int
	maxEntries    int
	maxFiles      int
	maxMatches    int
	maxWriteBytes int64

	shellTimeout    time.Duration
	shellMaxTimeout time.Duration
	shellInactivity time.Duration
	shellMaxOutput  int
	shellKillGrace  time.Duration
	// spillDir is where shell saves long outputs; "" means
	// os.TempDir()/toolmux-shell, decided when a spill happens.
	spillDir string
	// shellEnv replaces the environment of commands; nil means the
	// environment of toolmux.
	shellEnv []string

	// memoryDir keeps memory's facts on disk; "" keeps them in memory.
	memoryDir    string
	maxFactBytes int
	maxFacts     int

	// fetcher and searcher back web_fetch and web_search (see web.go).
	fetcher  *web.Fetcher
	searcher web.Searcher
}

// Option configures a [Source]. A non-positive value keeps the default, so
// a zero from an unset configuration field means "default", not "nothing".
type Option func(*limits)

// WithMaxReadBytes sets the largest file read_file returns and grep searches
// (default [DefaultMaxReadBytes]). It bounds the memory one call uses.
func WithMaxReadBytes(n int64) Option {
	return func(l *limits) {
		if n > 0 {
			l.maxReadBytes = n
		}
	}
}

// WithMaxLines sets how many lines one read_file call returns (default
// [DefaultMaxLines]); a larger limit argument is lowered to it.
func WithMaxLines(n int) Option {
	return func(l *limits) {
		if n > 0 {
			l.maxLines = n
		}
	}
}

// WithMaxLineLength sets the length in characters beyond which read_file
// and grep cut a line (default [DefaultMaxLineLength]).
func WithMaxLineLength(n int) Option {
	return func(l *limits) {
		if n > 0 {
			l.maxLineLength = n
		}
	}
}

// WithMaxEntries sets how many entries list_directory returns (default
// [DefaultMaxEntries]).
func WithMaxEntries(n int) Option {
	return func(l *limits) {
		if n > 0 {
			l.maxEntries = n
		}
	}
}

// WithMaxFiles sets how many paths glob returns (default [DefaultMaxFiles]).
func WithMaxFiles(n int) Option {
	return func(l *limits) {
		if n > 0 {
			l.maxFiles = n
		}
	}
}

// WithMaxMatches sets how many matching lines grep returns (default
// [DefaultMaxMatches]).
func WithMaxMatches(n int) Option {
	return func(l *limits) {
		if n > 0 {
			l.maxMatches = n
		}
	}
}

// WithMaxWriteBytes sets the largest content write_file writes and the
// largest file edit produces (default [DefaultMaxWriteBytes]).
func WithMaxWriteBytes(n int64) Option {
	return func(l *limits) {
		if n > 0 {
			l.maxWriteBytes = n
		}
	}
}

// WithShellTimeout sets how long a shell command runs when the call gives
// no timeout_ms (default [DefaultShellTimeout]). It is lowered to the
// maximum timeout if it exceeds it.
func WithShellTimeout(d time.Duration) Option {
	return func(l *limits) {
		if d > 0 {
			l.shellTimeout = d
		}
	}
}

// WithShellMaxTimeout sets the largest timeout_ms a shell call may ask for
// (default [DefaultShellMaxTimeout]); larger values are lowered to it.
func WithShellMaxTimeout(d time.Duration) Option {
	return func(l *limits) {
		if d > 0 {
			l.shellMaxTimeout = d
		}
	}
}

// WithShellInactivityTimeout sets how long a shell command may go without
// output before its process group is killed (default
// [DefaultShellInactivityTimeout]).
func WithShellInactivityTimeout(d time.Duration) Option {
	return func(l *limits) {
		if d > 0 {
			l.shellInactivity = d
		}
	}
}

// WithShellMaxOutputBytes sets how many bytes of a command's output the
// result holds (default [DefaultShellMaxOutputBytes]); beyond it the
// result keeps the first and last halves and the whole output is saved to
// a file in the spill directory.
func WithShellMaxOutputBytes(n int) Option {
	return func(l *limits) {
		if n > 0 {
			l.shellMaxOutput = n
		}
	}
}

// WithShellKillGrace sets how long a process group has between SIGTERM
// and SIGKILL (default [DefaultShellKillGrace]).
func WithShellKillGrace(d time.Duration) Option {
	return func(l *limits) {
		if d > 0 {
			l.shellKillGrace = d
		}
	}
}

// WithSpillDir sets the directory where shell saves outputs longer than
// the output limit (default: toolmux-shell in [os.TempDir]). It is created
// when first needed.
func WithSpillDir(dir string) Option {
	return func(l *limits) {
		if dir != "" {
			l.spillDir = dir
		}
	}
}

// WithShellEnv sets the environment of shell commands, as "KEY=value"
// strings. Without it (or with nil) commands get toolmux's own
// environment, secrets included; an empty non-nil slice gives them none.
func WithShellEnv(env []string) Option {
	return func(l *limits) {
		if env != nil {
			l.shellEnv = slices.Clone(env)
		}
	}
}

// WithMemoryDir makes memory durable: each task's facts are appended to a
// JSON-lines file in dir (created when first needed) and reloaded from it
// by a later Source. Without it facts live as long as the Source. One
// process at a time should use a directory.
func WithMemoryDir(dir string) Option {
	return func(l *limits) {
		if dir != "" {
			l.memoryDir = dir
		}
	}
}

// WithMaxFactBytes sets the largest fact memory saves, in bytes (default
// [DefaultMaxFactBytes]).
func WithMaxFactBytes(n int) Option {
	return func(l *limits) {
		if n > 0 {
			l.maxFactBytes = n
		}
	}
}

// WithMaxFacts sets how many facts memory keeps per task (default
// [DefaultMaxFacts]); saving more is refused.
func WithMaxFacts(n int) Option {
	return func(l *limits) {
		if n > 0 {
			l.maxFacts = n
		}
	}
}

// Source is the built-in tool source. It holds no open files and no
// processes between calls and is safe for concurrent use.
type Source struct {
	ws     workspace
	limits limits
	mem    *memoryStore
	// fetcher is limits.fetcher, or one of the source's own (ownFetcher),
	// which Close releases.
	fetcher    *web.Fetcher
	ownFetcher bool
}

// New returns the built-in source rooted at root. The root is made absolute
// and its symbolic links are resolved once, here, so that confinement checks
// compare against the real location; it must exist and be a directory.
func New(root string, opts ...Option) (*Source, error) {
	if root == "" {
		return nil, errors.New("builtin: workspace root is empty")
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("builtin: workspace root %q: %w", root, err)
	}
	resolved, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, fmt.Errorf("builtin: workspace root %q: %w", root, err)
	}
	fi, err := os.Stat(resolved)
	if err != nil {
		return nil, fmt.Errorf("builtin: workspace root %q: %w", root, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("builtin: workspace root %q is not a directory", root)
	}
	s := &Source{
		ws: workspace{root: filepath.Clean(resolved)},
		limits: limits{
			maxReadBytes:  DefaultMaxReadBytes,
			maxLines:      DefaultMaxLines,
			maxLineLength: DefaultMaxLineLength,
			maxEntries:    DefaultMaxEntries,
			maxFiles:      DefaultMaxFiles,
			maxMatches:    DefaultMaxMatches,
			maxWriteBytes: DefaultMaxWriteBytes,

			shellTimeout:    DefaultShellTimeout,
			shellMaxTimeout: DefaultShellMaxTimeout,
			shellInactivity: DefaultShellInactivityTimeout,
			shellMaxOutput:  DefaultShellMaxOutputBytes,
			shellKillGrace:  DefaultShellKillGrace,

			maxFactBytes: DefaultMaxFactBytes,
			maxFacts:     DefaultMaxFacts,
		},
	}
	if a := filepath.Clean(abs); a != s.ws.root {
		s.ws.alias = a
	}
	for _, o := range opts {
		if o != nil {
			o(&s.limits)
		}
	}
	s.limits.shellTimeout = min(s.limits.shellTimeout, s.limits.shellMaxTimeout)
	s.mem = newMemoryStore(s.limits.memoryDir)
	s.fetcher = s.limits.fetcher
	if s.fetcher == nil {
		s.fetcher, s.ownFetcher = web.NewFetcher(), true
	}
	return s, nil
}

// Name returns [ServerName].
func (s *Source) Name() string { return ServerName }

// Root returns the workspace root, absolute and free of symbolic links.
func (s *Source) Root() string { return s.ws.root }

// Close releases the idle connections of the source's own web fetcher.
// Nothing else is held between calls: memory opens its file for each save,
// and each shell call ends its processes before it returns.
func (s *Source) Close() error {
	if s.ownFetcher {
		return s.fetcher.Close()
	}
	return nil
}

// handler is one tool: its definition and its implementation. The error of
// call, when not a context error, is a *tool.Error; Call fills in the server
// and tool names.
type handler struct {
	def  func(*Source) tool.Tool
	call func(*Source, context.Context, args) (*tool.Result, error)
}

var handlers = map[string]handler{
	ListDirectory: {(*Source).listDirectoryTool, (*Source).listDirectory},
	ReadFile:      {(*Source).readFileTool, (*Source).readFile},
	Glob:          {(*Source).globTool, (*Source).glob},
	Grep:          {(*Source).grepTool, (*Source).grep},
	WriteFile:     {(*Source).writeFileTool, (*Source).writeFile},
	Edit:          {(*Source).editTool, (*Source).edit},
	Shell:         {(*Source).shellTool, (*Source).shell},
	Memory:        {(*Source).memoryTool, (*Source).memory},
	WebFetch:      {(*Source).webFetchTool, (*Source).webFetch},
	WebSearch:     {(*Source).webSearchTool, (*Source).webSearch},
}

// Tools returns the definitions of the tools, sorted by name. Each call
// returns fresh values, so callers may modify them.
func (s *Source) Tools(ctx context.Context) ([]tool.Tool, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	names := toolNames()
	out := make([]tool.Tool, 0, len(names))
	for _, n := range names {
		if s.offered(n) {
			out = append(out, handlers[n].def(s))
		}
	}
	return out, nil
}

// Call runs one tool. Failures are returned as *tool.Error values (the
// tool's own refusals included: a path outside the workspace, a missing
// file, a bad argument), except cancellation, which returns ctx.Err().
func (s *Source) Call(ctx context.Context, name string, arguments map[string]any) (*tool.Result, error) {
	h, ok := handlers[name]
	if !ok {
		return nil, &tool.Error{
			Kind:       tool.KindToolNotRegistered,
			Message:    fmt.Sprintf("no built-in tool named %q; the built-in tools are %s", name, strings.Join(toolNames(), ", ")),
			Server:     ServerName,
			Tool:       name,
			Suggestion: tool.Closest(name, toolNames()),
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	res, err := h.call(s, ctx, args{Tool: name, M: arguments})
	if err != nil {
		if te, ok := errors.AsType[*tool.Error](err); ok {
			if te.Server == "" {
				te.Server = ServerName
			}
			if te.Tool == "" {
				te.Tool = name
			}
		}
		return nil, err
	}
	return res, nil
}

func toolNames() []string {
	names := make([]string, 0, len(handlers))
	for n := range handlers {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// readOnly are the annotations of the tools that look at files: they
// change nothing, and they see only the workspace.
func readOnly(title string) tool.Annotations {
	return tool.Annotations{
		Title:       title,
		ReadOnly:    tool.Bool(true),
		Idempotent:  tool.Bool(true),
		Destructive: tool.Bool(false),
		OpenWorld:   tool.Bool(false),
	}
}

// fileWriter are the annotations of the tools that change files: they can
// destroy what a file held, and they touch only the workspace. Writing the
// same content twice leaves the same file, so write_file is idempotent; an
// edit applied twice does not find its old_string again, so edit is not.
func fileWriter(title string, idempotent bool) tool.Annotations {
	return tool.Annotations{
		Title:       title,
		ReadOnly:    tool.Bool(false),
		Idempotent:  tool.Bool(idempotent),
		Destructive: tool.Bool(true),
		OpenWorld:   tool.Bool(false),
	}
}

// objectSchema builds the JSON Schema of an arguments object.
func objectSchema(props map[string]any, required ...string) map[string]any {
	if required == nil {
		required = []string{}
	}
	return map[string]any{
		"type":                 "object",
		"properties":           props,
		"required":             required,
		"additionalProperties": false,
	}
}

// args reads a call's arguments; the alias keeps the many handler
// signatures short.
type args = toolargs.Args

// pathArg reads and resolves a path argument. An absent optional path means
// the workspace root.
func (s *Source) pathArg(a args, name string, required bool) (location, string, error) {
	p, _, err := a.String(name, required)
	if err != nil {
		return location{}, "", err
	}
	loc, err := s.ws.resolve(name, p)
	if err != nil {
		return location{}, "", err
	}
	return loc, p, nil
}

// size formats a byte count for a limit: in MiB or KiB when it is a whole
// number of them, which the defaults are, else in bytes.
func size(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// plural formats a count with its noun.
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
