// Package builtin is the toolmux source of the built-in file tools:
// list_directory, read_file, glob and grep, with the argument names of
// Gemini CLI's tools so that models trained on those call them correctly.
//
// Every tool is read-only and confined to one workspace root. A path argument
// may be relative to the root or absolute; anything that resolves outside the
// root, by "..", by an absolute path or through a symbolic link, is refused
// with a path_not_in_workspace error, and every file is opened through an
// [os.Root] so the kernel enforces the same boundary. Walks never follow a
// symbolic link to a directory and skip links that lead outside.
package builtin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/toolmux/toolmux/tool"
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
)

// Tool names.
const (
	ListDirectory = "list_directory"
	ReadFile      = "read_file"
	Glob          = "glob"
	Grep          = "grep"
)

// limits holds the configured limits.
type limits struct {
	maxReadBytes  int64
	maxLines      int
	maxLineLength int
	maxEntries    int
	maxFiles      int
	maxMatches    int
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

// Source is the built-in tool source. It holds no open files between calls
// and is safe for concurrent use.
type Source struct {
	ws     workspace
	limits limits
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
	return s, nil
}

// Name returns [ServerName].
func (s *Source) Name() string { return ServerName }

// Root returns the workspace root, absolute and free of symbolic links.
func (s *Source) Root() string { return s.ws.root }

// Close does nothing: a Source holds no resources between calls. It exists
// so the manager can treat every source alike.
func (s *Source) Close() error { return nil }

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
}

// Tools returns the definitions of the four tools, sorted by name. Each call
// returns fresh values, so callers may modify them.
func (s *Source) Tools(ctx context.Context) ([]tool.Tool, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	names := toolNames()
	out := make([]tool.Tool, 0, len(names))
	for _, n := range names {
		out = append(out, handlers[n].def(s))
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
	res, err := h.call(s, ctx, args{tool: name, m: arguments})
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

// readOnly are the annotations every built-in tool declares: it changes
// nothing, and it sees only the workspace.
func readOnly(title string) tool.Annotations {
	return tool.Annotations{
		Title:       title,
		ReadOnly:    tool.Bool(true),
		Idempotent:  tool.Bool(true),
		Destructive: tool.Bool(false),
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

// args reads a call's arguments. Its methods return invalid_tool_params
// errors that name the argument and what was expected, for the model to
// correct its call.
type args struct {
	tool string
	m    map[string]any
}

func (a args) invalid(format string, v ...any) error {
	return &tool.Error{Kind: tool.KindInvalidParams, Message: fmt.Sprintf(format, v...)}
}

// check refuses arguments the tool does not take: the schema forbids them,
// and a misspelt optional argument would otherwise be ignored silently.
func (a args) check(known ...string) error {
	var unknown []string
	for k := range a.m {
		if !slices.Contains(known, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	sort.Strings(unknown)
	return a.invalid("%s does not take the argument(s) %s; its arguments are %s",
		a.tool, quoteAll(unknown), quoteAll(known))
}

// str returns a string argument. A JSON null counts as absent, since models
// often send null for optional arguments they do not use.
func (a args) str(name string, required bool) (string, bool, error) {
	v, ok := a.m[name]
	if !ok || v == nil {
		if required {
			return "", false, a.invalid("missing required argument %q (a string)", name)
		}
		return "", false, nil
	}
	s, ok := v.(string)
	if !ok {
		return "", false, a.invalid("argument %q must be a string, not %s", name, jsonType(v))
	}
	if required && s == "" {
		return "", false, a.invalid("argument %q must not be empty", name)
	}
	return s, true, nil
}

// integer returns a non-negative integer argument no smaller than least.
// JSON numbers arrive as float64, or as json.Number from decoders that keep
// them; Go callers may pass any integer type.
func (a args) integer(name string, least int) (int, bool, error) {
	v, ok := a.m[name]
	if !ok || v == nil {
		return 0, false, nil
	}
	var n int64
	switch x := v.(type) {
	case float64, float32:
		f, _ := x.(float64)
		if f32, ok := x.(float32); ok {
			f = float64(f32)
		}
		if f != math.Trunc(f) || math.IsInf(f, 0) || math.IsNaN(f) {
			return 0, false, a.invalid("argument %q must be an integer, not %v", name, f)
		}
		n = int64(max(min(f, 1<<62), -1<<62))
	case json.Number:
		i, err := x.Int64()
		if err != nil {
			f, ferr := x.Float64()
			if ferr != nil || f != math.Trunc(f) || math.IsInf(f, 0) {
				return 0, false, a.invalid("argument %q must be an integer, not %s", name, x.String())
			}
			i = int64(max(min(f, 1<<62), -1<<62))
		}
		n = i
	case int:
		n = int64(x)
	case int8:
		n = int64(x)
	case int16:
		n = int64(x)
	case int32:
		n = int64(x)
	case int64:
		n = x
	case uint:
		n = clampUint(uint64(x))
	case uint8:
		n = int64(x)
	case uint16:
		n = int64(x)
	case uint32:
		n = int64(x)
	case uint64:
		n = clampUint(x)
	default:
		return 0, false, a.invalid("argument %q must be an integer, not %s", name, jsonType(v))
	}
	if n < int64(least) {
		return 0, false, a.invalid("argument %q must be at least %d, not %d", name, least, n)
	}
	if n > math.MaxInt {
		n = math.MaxInt
	}
	return int(n), true, nil
}

func clampUint(u uint64) int64 {
	if u > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(u)
}

// jsonType names the JSON type of a decoded value, for error messages.
func jsonType(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case float64, float32, json.Number, int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
		return "a number"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("a %T", v)
}

func quoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}

// pathArg reads and resolves a path argument. An absent optional path means
// the workspace root.
func (s *Source) pathArg(a args, name string, required bool) (location, string, error) {
	p, _, err := a.str(name, required)
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
