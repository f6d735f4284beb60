package builtin

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/toolmux/toolmux/tool"
)

// memory's actions.
const (
	memorySave   = "save"
	memoryList   = "list"
	memoryRecall = "recall"
)

// maxTaskNameInFile bounds the readable part of a memory file's name; the
// hash that follows it keeps names distinct.
const maxTaskNameInFile = 40

func (s *Source) memoryTool() tool.Tool {
	durable := "They are kept for as long as toolmux runs."
	if s.limits.memoryDir != "" {
		durable = "They are kept on disk and survive a restart."
	}
	return tool.Tool{
		Server: ServerName,
		Name:   Memory,
		Title:  "Remember facts",
		Description: fmt.Sprintf(`Saves facts worth remembering for the rest of this task (a finding, a decision, a path, a preference the user stated) and recalls them later, so they need not stay in the conversation. Facts are kept per task. %s
action "save" stores fact (one self-contained statement, at most %s) and returns its number; saving a fact that is already saved returns its existing number. action "list" returns every fact of the task, numbered, oldest first. action "recall" returns the facts that contain every word of query (case-insensitive; words match inside longer words), newest first; when no fact contains them all, the facts containing the most of them are returned instead. At most %d facts are kept per task.`,
			durable, size(int64(s.limits.maxFactBytes)), s.limits.maxFacts),
		InputSchema: objectSchema(map[string]any{
			"action": map[string]any{
				"type":        "string",
				"enum":        []any{memorySave, memoryList, memoryRecall},
				"description": `"save" to store fact, "list" to see every fact, "recall" to find the facts about query.`,
			},
			"fact": map[string]any{
				"type":        "string",
				"description": `The fact to save (action "save" only): a self-contained statement, e.g. "The API server listens on port 8080".`,
			},
			"query": map[string]any{
				"type":        "string",
				"description": `Words to look for (action "recall" only), e.g. "api port".`,
			},
		}, "action"),
		Annotations: tool.Annotations{
			Title:       "Remember facts",
			ReadOnly:    tool.Bool(false),
			Destructive: tool.Bool(false),
			Idempotent:  tool.Bool(false),
			OpenWorld:   tool.Bool(false),
		},
	}
}

func (s *Source) memory(ctx context.Context, a args) (*tool.Result, error) {
	if err := a.Check("action", "fact", "query"); err != nil {
		return nil, err
	}
	action, _, err := a.String("action", true)
	if err != nil {
		return nil, err
	}
	factArg, _, err := a.String("fact", false)
	if err != nil {
		return nil, err
	}
	query, _, err := a.String("query", false)
	if err != nil {
		return nil, err
	}
	switch action {
	case memorySave, memoryList, memoryRecall:
	default:
		return nil, a.Invalid("argument \"action\" must be \"save\", \"list\" or \"recall\", not %q", action)
	}
	// An argument the action does not use is a sign the model meant another
	// action; ignoring it would silently do something else.
	if action != memorySave && strings.TrimSpace(factArg) != "" {
		return nil, a.Invalid("argument \"fact\" is only used with action \"save\"; to store it, call memory with action \"save\"")
	}
	if action != memoryRecall && strings.TrimSpace(query) != "" {
		return nil, a.Invalid("argument \"query\" is only used with action \"recall\"")
	}
	// Calls outside any task (a Go program calling the source directly)
	// share the "" namespace.
	call, _ := tool.CallFrom(ctx)
	task := call.Task

	switch action {
	case memorySave:
		fact := strings.TrimSpace(factArg)
		if fact == "" {
			return nil, a.Invalid("action \"save\" needs a non-empty \"fact\" to store")
		}
		if len(fact) > s.limits.maxFactBytes {
			return nil, a.Invalid("argument \"fact\" is %d bytes, over the limit of %s; save a shorter statement, or write longer notes to a file with write_file and save its path",
				len(fact), size(int64(s.limits.maxFactBytes)))
		}
		n, dup, err := s.mem.save(task, fact, s.limits.maxFacts)
		if err != nil {
			return nil, err
		}
		msg := fmt.Sprintf("Saved fact #%d.", n)
		if dup {
			msg = fmt.Sprintf("This fact was already saved as fact #%d.", n)
		}
		res := tool.TextResult(msg)
		res.Structured = map[string]any{"n": n, "already_saved": dup}
		return res, nil
	case memoryList:
		facts, err := s.mem.facts(task)
		if err != nil {
			return nil, err
		}
		if len(facts) == 0 {
			return factsResult("No facts saved in this task yet.", nil), nil
		}
		return factsResult(fmt.Sprintf("%s saved in this task:", plural(len(facts), "fact", "facts")), facts), nil
	}

	words := queryWords(query)
	if len(words) == 0 {
		return nil, a.Invalid("action \"recall\" needs a \"query\" with at least one word; to see every fact, use action \"list\"")
	}
	facts, err := s.mem.facts(task)
	if err != nil {
		return nil, err
	}
	all, some := recall(facts, words)
	switch {
	case len(all) > 0:
		return factsResult(fmt.Sprintf("%s of %d %s all of %q (newest first):", plural(len(all), "fact", "facts"), len(facts), contain(len(all)), query), all), nil
	case len(some) > 0:
		return factsResult(fmt.Sprintf("No fact contains all of %q; %s of %d %s some of its words (most matching words first, then newest):", query, plural(len(some), "fact", "facts"), len(facts), contain(len(some))), some), nil
	}
	return factsResult(fmt.Sprintf("No fact of this task contains any of the words of %q (%s saved).", query, plural(len(facts), "fact is", "facts are")), nil), nil
}

// contain agrees the verb with a count of facts.
func contain(n int) string {
	if n == 1 {
		return "contains"
	}
	return "contain"
}

// factsResult lists facts under a heading, numbered, a fact of several
// lines indented under its number.
func factsResult(heading string, facts []memoryFact) *tool.Result {
	var b strings.Builder
	b.WriteString(heading)
	list := make([]map[string]any, 0, len(facts))
	for _, f := range facts {
		fmt.Fprintf(&b, "\n%d. %s", f.N, strings.ReplaceAll(f.Fact, "\n", "\n   "))
		list = append(list, map[string]any{"n": f.N, "fact": f.Fact})
	}
	res := tool.TextResult(b.String())
	res.Structured = map[string]any{"facts": list}
	return res
}

// queryWords splits a query into distinct lower-case words, without the
// punctuation around them.
func queryWords(q string) []string {
	var words []string
	for _, w := range strings.Fields(strings.ToLower(q)) {
		w = strings.TrimFunc(w, unicode.IsPunct)
		if w != "" && !slices.Contains(words, w) {
			words = append(words, w)
		}
	}
	return words
}

// recall returns the facts that contain every word, newest first, and,
// only when there are none, those that contain some of them, by number of
// words they contain and then newest first. Words match inside longer
// words, so "deploy" finds "deployment".
func recall(facts []memoryFact, words []string) (all, some []memoryFact) {
	type scored struct {
		f memoryFact
		n int
	}
	var partial []scored
	for _, f := range facts {
		text := strings.ToLower(f.Fact)
		n := 0
		for _, w := range words {
			if strings.Contains(text, w) {
				n++
			}
		}
		switch {
		case n == len(words):
			all = append(all, f)
		case n > 0:
			partial = append(partial, scored{f, n})
		}
	}
	slices.SortStableFunc(all, func(x, y memoryFact) int { return cmp.Compare(y.N, x.N) })
	if len(all) > 0 {
		return all, nil
	}
	slices.SortStableFunc(partial, func(x, y scored) int {
		return cmp.Or(cmp.Compare(y.n, x.n), cmp.Compare(y.f.N, x.f.N))
	})
	for _, p := range partial {
		some = append(some, p.f)
	}
	return nil, some
}

// memoryFact is one saved fact, and one line of a memory file.
type memoryFact struct {
	// N numbers the facts of a task from 1, in the order they were saved.
	N     int       `json:"n"`
	Fact  string    `json:"fact"`
	Saved time.Time `json:"saved"`
}

// memoryStore keeps facts per task. With a directory, each task's facts
// are appended to a file there as they are saved, and read back the first
// time the task is used; one mutex serialises everything, which is ample
// for a tool called a few times per turn.
type memoryStore struct {
	dir   string
	mu    sync.Mutex
	tasks map[string]*taskFacts
}

// taskFacts are the facts of one task.
type taskFacts struct {
	facts []memoryFact
	// torn is set when the file ends without a newline (a save cut short
	// by a crash): the next line must start on a line of its own.
	torn bool
}

func newMemoryStore(dir string) *memoryStore {
	return &memoryStore{dir: dir, tasks: map[string]*taskFacts{}}
}

// facts returns a copy of the facts of task, oldest first.
func (m *memoryStore) facts(task string) ([]memoryFact, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, err := m.load(task)
	if err != nil {
		return nil, err
	}
	return slices.Clone(t.facts), nil
}

// save stores fact for task and returns its number; a fact already saved
// is not stored again, and its number is returned with dup set.
func (m *memoryStore) save(task, fact string, limit int) (n int, dup bool, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, err := m.load(task)
	if err != nil {
		return 0, false, err
	}
	for _, f := range t.facts {
		if f.Fact == fact {
			return f.N, true, nil
		}
	}
	if len(t.facts) >= limit {
		return 0, false, &tool.Error{Kind: tool.KindToolError,
			Message: fmt.Sprintf("this task already has %d facts, the most memory keeps; recall or list them instead of saving more", limit)}
	}
	f := memoryFact{N: 1, Fact: fact, Saved: time.Now().UTC()}
	if len(t.facts) > 0 {
		f.N = t.facts[len(t.facts)-1].N + 1
	}
	if m.dir != "" {
		if err := m.append(task, t, f); err != nil {
			return 0, false, err
		}
	}
	t.facts = append(t.facts, f)
	return f.N, false, nil
}

// load returns the facts of task, reading its file the first time. A read
// error is returned and not remembered, so a later call tries again.
func (m *memoryStore) load(task string) (*taskFacts, error) {
	if t, ok := m.tasks[task]; ok {
		return t, nil
	}
	t := &taskFacts{}
	if m.dir != "" {
		data, err := os.ReadFile(m.path(task))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, &tool.Error{Kind: tool.KindExecutionFailed, Err: err,
				Message: fmt.Sprintf("cannot read the saved facts: %v", err)}
		}
		t.torn = len(data) > 0 && data[len(data)-1] != '\n'
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(nil, len(data)+1)
		for sc.Scan() {
			var f memoryFact
			// A line that does not parse is the torn end of a save that
			// never completed; that save was never reported as done.
			if json.Unmarshal(sc.Bytes(), &f) == nil && f.N > 0 && f.Fact != "" {
				t.facts = append(t.facts, f)
			}
		}
		slices.SortStableFunc(t.facts, func(x, y memoryFact) int { return cmp.Compare(x.N, y.N) })
	}
	m.tasks[task] = t
	return t, nil
}

// append writes f to the file of task and flushes it to disk before the
// save is reported, so a reported save survives a crash.
func (m *memoryStore) append(task string, t *taskFacts, f memoryFact) error {
	line, err := json.Marshal(f)
	if err != nil {
		return &tool.Error{Kind: tool.KindExecutionFailed, Err: err, Message: fmt.Sprintf("cannot encode the fact: %v", err)}
	}
	if t.torn {
		line = append([]byte{'\n'}, line...)
	}
	line = append(line, '\n')
	fail := func(err error) error {
		return &tool.Error{Kind: tool.KindExecutionFailed, Err: err,
			Message: fmt.Sprintf("cannot save the fact: %v", err)}
	}
	if err := os.MkdirAll(m.dir, 0o700); err != nil {
		return fail(err)
	}
	file, err := os.OpenFile(m.path(task), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fail(err)
	}
	_, err = file.Write(line)
	if err == nil {
		err = file.Sync()
	}
	if cerr := file.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fail(err)
	}
	t.torn = false
	return nil
}

// path is the file of task: a readable, safe form of the task id followed
// by a hash of the id itself, so that ids differing only in characters
// that had to be replaced, or in case on a case-insensitive file system,
// still get different files, and no id can name a path outside dir.
func (m *memoryStore) path(task string) string {
	var b strings.Builder
	for _, r := range task {
		if b.Len() >= maxTaskNameInFile {
			break
		}
		if r < 0x80 && (unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	name := b.String()
	if name == "" {
		name = "shared"
	}
	sum := sha256.Sum256([]byte(task))
	return filepath.Join(m.dir, "task-"+name+"-"+hex.EncodeToString(sum[:8])+".jsonl")
}
