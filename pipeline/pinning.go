package pipeline

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/toolmux/toolmux/tool"
)

// Pinning policies, the values of PinningOptions.Policy and of its
// per-server overrides.
const (
	// PinHold refuses the calls of a changed tool (tool_changed) until a
	// person accepts the new definition.
	PinHold = "hold"
	// PinAsk asks for approval of each call of a changed tool, with the
	// difference in the question (PinningOptions.Ask).
	PinAsk = "ask"
	// PinWarn lets the calls of a changed tool go on, with a note.
	PinWarn = "warn"
	// PinOff neither pins nor checks.
	PinOff = "off"
)

// Pin states, as Pins.State reports them.
const (
	PinStatePinned  = "pinned"  // the definition is the pinned one (or was pinned just now)
	PinStateChanged = "changed" // the server presents another definition
	PinStateOff     = "off"     // the tool's server is not pinned
)

// DefaultMaxPinBytes bounds the canonical definition a pin keeps for diffs
// (PinningOptions.MaxDefinitionBytes); a larger one is pinned by its hash
// alone.
const DefaultMaxPinBytes = 256 << 10

// maxPinCache bounds the definitions Pins remembers in memory; past it the
// cache starts again (it only saves re-reading files and re-hashing).
const maxPinCache = 100_000

// maxDiffLines bounds the changed lines a diff is computed over (its
// memory is their product); past it the diff lists both sides' lines.
const maxDiffLines = 500

// PinningOptions configure pinned tool definitions (NewPins).
type PinningOptions struct {
	// Dir is where pins are kept (the data directory's pins/), one file per
	// tool; "" keeps no pins and checks nothing.
	Dir string
	// Policy is PinHold (the default), PinAsk, PinWarn or PinOff.
	Policy string
	// Servers overrides Policy for the servers named.
	Servers map[string]string
	// Pinned says which servers are pinned at all (the configured ones, not
	// the built-in tools, whose descriptions change with toolmux itself);
	// nil: every server.
	Pinned func(server string) bool
	// Ask asks a person whether a call of a changed tool may run, with
	// question describing the change; a nil error lets it run. Without it,
	// PinAsk holds as PinHold does.
	Ask func(ctx context.Context, call tool.Call, def tool.Tool, question string) error
	// MaxDefinitionBytes bounds the canonical definition kept for diffs; 0
	// means DefaultMaxPinBytes.
	MaxDefinitionBytes int
}

// Pin is one tool's pinned definition, as stored.
type Pin struct {
	Server string `json:"server"`
	Tool   string `json:"tool"`
	// SHA256 is the hex sha256 of the canonical definition.
	SHA256 string `json:"sha256"`
	// Definition is the canonical definition (name, description, input
	// schema, annotations); nil when it was larger than the bound.
	Definition json.RawMessage `json:"definition,omitempty"`
	// Size is the canonical definition's length in bytes.
	Size     int       `json:"size"`
	PinnedAt time.Time `json:"pinned_at"`
	// Accepted is set when a person accepted this definition in place of
	// an earlier one.
	Accepted bool `json:"accepted,omitempty"`
}

// PinStatus is a tool's pin state against the definition its server
// presents now.
type PinStatus struct {
	Server string `json:"server"`
	Tool   string `json:"tool"`
	// State is PinStatePinned, PinStateChanged or PinStateOff.
	State string `json:"state"`
	// Policy is what a call of the tool meets when it changed.
	Policy string `json:"policy"`
	// Pinned and Current are the sha256 of the pinned and presented definitions.
	Pinned  string `json:"pinned,omitempty"`
	Current string `json:"current,omitempty"`
	// Diff is the readable difference, when changed.
	Diff string `json:"diff,omitempty"`
	// parts are the parts of the definition that changed (description,
	// input schema, annotations), when the pin kept its definition.
	parts []string
}

// Pins keeps the fingerprints of tool definitions in a directory shared by
// every process of a data directory, and holds calls of tools whose
// definition changed. It is safe for concurrent use; processes sharing the
// directory agree through its files (the first pin of a tool is created
// exclusively, an acceptance replaces the file atomically).
type Pins struct {
	o     PinningOptions
	mu    sync.RWMutex
	cache map[pinKey]*pinEntry
	// shown is the last catalog Shown was given and what it made of it.
	shown atomic.Pointer[shownCatalog]
}

// shownCatalog is a catalog as Shown made it: from is the one given, to the
// one shown, held the tools shown by their pin, with that pin's sha256.
type shownCatalog struct {
	from, to *tool.Catalog
	held     map[pinKey]string
}

type pinKey struct{ server, tool string }

// pinEntry remembers the last definition checked for a tool, by identity
// (the catalog is immutable, so the same definition has the same schema
// map), so a call of an unchanged tool costs no hashing or file access.
type pinEntry struct {
	desc    string
	schema  uintptr
	ann     tool.Annotations
	current string   // sha256 of that definition
	pinned  string   // sha256 of the pin it was checked against
	diff    string   // their difference, when they differ
	parts   []string // the parts that differ
}

// NewPins returns the pins the options describe. With no Dir, or with every
// server off, its middleware passes calls through untouched.
func NewPins(o PinningOptions) (*Pins, error) {
	for _, p := range append([]string{o.Policy}, mapValues(o.Servers)...) {
		if p != "" && !slices.Contains([]string{PinHold, PinAsk, PinWarn, PinOff}, p) {
			return nil, fmt.Errorf("pinning: unknown policy %q (expected hold, ask, warn or off)", p)
		}
	}
	if o.Policy == "" {
		o.Policy = PinHold
	}
	if o.MaxDefinitionBytes <= 0 {
		o.MaxDefinitionBytes = DefaultMaxPinBytes
	}
	return &Pins{o: o, cache: map[pinKey]*pinEntry{}}, nil
}

func mapValues(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// Policy returns the policy that applies to server.
func (p *Pins) Policy(server string) string {
	if p == nil || p.o.Dir == "" || p.o.Pinned != nil && !p.o.Pinned(server) {
		return PinOff
	}
	if s, ok := p.o.Servers[server]; ok && s != "" {
		return s
	}
	return p.o.Policy
}

// Middleware checks each call's definition against its pin: the first
// definition seen is pinned; a changed one is held (tool_changed, with the
// difference), asked about, or noted, as the server's policy says.
func (p *Pins) Middleware(lookup ToolLookup) Middleware {
	return func(next Handler) Handler {
		return HandlerFunc(func(ctx context.Context, call tool.Call) *tool.Record {
			pol := p.Policy(call.Server)
			if pol == PinOff {
				return next.Call(ctx, call)
			}
			def := call.Def()
			if def == nil {
				t, err := lookup.Tool(ctx, call.Server, call.Tool)
				if err != nil {
					// The layers below answer an unknown tool.
					return next.Call(ctx, call)
				}
				def = &t
			}
			st, err := p.check(*def, pol, true)
			if err != nil {
				// A pin that cannot be read or written must not let a
				// changed tool through unnoticed, nor stop every call:
				// the call goes on, with a note.
				rec := next.Call(ctx, call)
				rec.Note("pinning", "pin not checked: "+err.Error(), nil)
				return rec
			}
			if st.State != PinStateChanged {
				return next.Call(ctx, call)
			}
			// The difference is for people: the question asked, the
			// record's note (the task log, toolmux call --json).
			msg := fmt.Sprintf("the definition of %s/%s changed since it was pinned (pinned %s, now %s); "+
				"a person must accept it (toolmux tools --accept %s/%s)\n%s",
				call.Server, call.Tool, short(st.Pinned), short(st.Current), call.Server, call.Tool, st.Diff)
			data := map[string]any{"pinned": st.Pinned, "current": st.Current}
			switch pol {
			case PinWarn:
				rec := next.Call(ctx, call)
				rec.Note("pinning", msg, data)
				return rec
			case PinAsk:
				if p.o.Ask != nil {
					if err := p.o.Ask(ctx, call, *def, msg); err != nil {
						return refuse(call, tool.AsError(err))
					}
					rec := next.Call(ctx, call)
					rec.Note("pinning", "changed definition approved for this call", data)
					return rec
				}
			}
			// The refusal is what the model reads: it says what changed
			// and what a person must do, not what the new definition
			// says, which is what the hold keeps from the model (as the
			// listings do, Shown).
			rec := refuse(call, &tool.Error{Kind: tool.KindToolChanged, Server: call.Server, Tool: call.Tool,
				Message: heldMessage(call.Server, call.Tool, st)})
			rec.Note("pinning", msg, data)
			return rec
		})
	}
}

// heldMessage is the refusal of a held tool's call.
func heldMessage(server, name string, st PinStatus) string {
	what := "its definition"
	if len(st.parts) > 0 {
		words := make([]string, len(st.parts))
		for i, part := range st.parts {
			words[i] = strings.ReplaceAll(part, "_", " ")
		}
		what = "its " + words[len(words)-1]
		if n := len(words); n > 1 {
			what = "its " + strings.Join(words[:n-1], ", ") + " and " + words[n-1]
		}
	}
	return fmt.Sprintf("the definition of %s/%s changed since it was pinned (pinned %s, now %s: %s changed); "+
		"its calls are held until a person reviews the change and accepts it (toolmux tools shows the difference; "+
		"toolmux tools --accept %s/%s accepts it). The new definition is not shown to models before it is accepted.",
		server, name, short(st.Pinned), short(st.Current), what, server, name)
}

func short(sum string) string {
	if len(sum) > 12 {
		return sum[:12]
	}
	return sum
}

// Status returns the pin state of def, pinning it first if its tool was
// never seen (as a call would).
func (p *Pins) Status(def tool.Tool) (PinStatus, error) {
	pol := p.Policy(def.Server)
	if pol == PinOff {
		return PinStatus{Server: def.Server, Tool: def.Name, State: PinStateOff, Policy: pol}, nil
	}
	return p.check(def, pol, false)
}

// Shown returns cat as a model may be shown it. A tool whose server now
// presents another definition than the pinned one, under a policy that
// wants a person to accept the change before it is used (hold; ask), is
// listed with its pinned definition (description, input schema and
// annotations, and a title taken from them), not the one presented: the
// hold exists to keep the new text from the model, and a listing carrying
// it would hand the model whatever it says (to act on with other tools)
// while the call itself is refused. Listing the pinned definition rather
// than leaving the tool out keeps the model's catalog, and a client's
// prompt cache, as they were, and a call of the tool is still answered
// tool_changed, which says what a person must do. A pin whose definition
// was too large to keep has nothing to show: its tool is listed with a
// description saying so and an empty object schema. Under warn and off,
// and for a tool whose pin cannot be read (its calls go on, noted), the
// definition presented is listed.
//
// Tools never seen are pinned, as a call would. The same cat gives the
// same catalog back while nothing changes, so that those who compare
// catalogs by identity (the gateway's views) see no change; the pin of a
// tool shown by it is read again each time, so an acceptance in any
// process lists the new definition at the next listing.
func (p *Pins) Shown(cat *tool.Catalog) *tool.Catalog {
	if p == nil || p.o.Dir == "" || cat == nil {
		return cat
	}
	if m := p.shown.Load(); m != nil && m.from == cat && p.stillHeld(m.held) {
		return m.to
	}
	m := p.show(cat)
	p.shown.Store(m)
	return m.to
}

// stillHeld says whether each tool is still pinned as it was.
func (p *Pins) stillHeld(held map[pinKey]string) bool {
	for k, sum := range held {
		if pin, err := p.read(k); err != nil || pin.SHA256 != sum {
			return false
		}
	}
	return true
}

// show makes what Shown returns for cat.
func (p *Pins) show(cat *tool.Catalog) *shownCatalog {
	m := &shownCatalog{from: cat, to: cat}
	var tools []tool.Tool
	for i, t := range cat.Tools() {
		pol := p.Policy(t.Server)
		if pol != PinHold && pol != PinAsk {
			continue
		}
		st, pin, err := p.checkPin(t, pol, true)
		if err != nil || st.State != PinStateChanged {
			continue
		}
		if tools == nil {
			tools, m.held = slices.Clone(cat.Tools()), map[pinKey]string{}
		}
		tools[i] = shownByPin(t, pin)
		m.held[pinKey{t.Server, t.Name}] = pin.SHA256
	}
	if tools != nil {
		m.to = tool.NewCatalog(tools, cat.Servers())
	}
	return m
}

// shownByPin returns cur, as its server presents it now, with the parts a
// pin covers taken from pin.
func shownByPin(cur tool.Tool, pin Pin) tool.Tool {
	s := cur
	// A title the source took from the annotations (MCP's annotations
	// title) follows them; one of the tool's own is not pinned.
	fromAnnotations := cur.Title != "" && cur.Title == cur.Annotations.Title
	var d pinned
	if pin.Definition != nil && json.Unmarshal(pin.Definition, &d) == nil {
		s.Description, s.InputSchema, s.Annotations = d.Description, d.InputSchema, d.Annotations
	} else {
		s.Description = fmt.Sprintf("(toolmux holds this tool: its definition changed since it was pinned, and the pinned one, "+
			"%d bytes, was too large to keep, so neither is shown. Its calls are held until a person accepts the new definition: "+
			"toolmux tools --accept %s/%s)", pin.Size, cur.Server, cur.Name)
		s.InputSchema, s.Annotations = map[string]any{"type": "object"}, tool.Annotations{}
	}
	if fromAnnotations {
		s.Title = s.Annotations.Title
	}
	return s
}

// check compares def with its pin, pinning it when there is none; cached
// says whether an unchanged definition may be answered from memory.
func (p *Pins) check(def tool.Tool, pol string, cached bool) (PinStatus, error) {
	st, _, err := p.checkPin(def, pol, cached)
	return st, err
}

// checkPin is check, also returning the pin def was compared with when it
// was read (always when def changed).
func (p *Pins) checkPin(def tool.Tool, pol string, cached bool) (PinStatus, Pin, error) {
	k := pinKey{def.Server, def.Name}
	schema := mapID(def.InputSchema)
	if cached {
		p.mu.RLock()
		e := p.cache[k]
		p.mu.RUnlock()
		if e != nil && e.current == e.pinned && e.desc == def.Description && e.schema == schema && e.ann == def.Annotations {
			return PinStatus{Server: k.server, Tool: k.tool, State: PinStatePinned, Policy: pol, Pinned: e.pinned, Current: e.current}, Pin{}, nil
		}
	}
	canon, err := Canonical(def)
	if err != nil {
		return PinStatus{}, Pin{}, err
	}
	sum := sha(canon)
	pin, err := p.read(k)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		pin, err = p.create(def, canon, sum)
	case errors.Is(err, errPinCorrupt):
		// Only a crash while a first pin was written leaves one that
		// does not parse: that first sight is made again.
		pin = p.newPin(def, canon, sum)
		err = p.replace(pin)
	}
	if err != nil {
		return PinStatus{}, Pin{}, err
	}
	st := PinStatus{Server: k.server, Tool: k.tool, State: PinStatePinned, Policy: pol, Pinned: pin.SHA256, Current: sum}
	if pin.SHA256 != sum {
		st.State = PinStateChanged
		// A held tool is checked again on each call (an acceptance
		// elsewhere must release it); its difference is computed once.
		p.mu.RLock()
		e := p.cache[k]
		p.mu.RUnlock()
		if e != nil && e.current == sum && e.pinned == pin.SHA256 && e.diff != "" {
			st.Diff, st.parts = e.diff, e.parts
		} else {
			st.Diff, st.parts = pinDiff(pin, canon), changedParts(pin, canon)
		}
	}
	p.mu.Lock()
	if len(p.cache) >= maxPinCache {
		clear(p.cache)
	}
	p.cache[k] = &pinEntry{desc: def.Description, schema: schema, ann: def.Annotations, current: sum, pinned: pin.SHA256, diff: st.Diff, parts: st.parts}
	p.mu.Unlock()
	return st, pin, nil
}

// mapID is a map's identity: the same definition of an immutable catalog
// has the same schema map.
func mapID(m map[string]any) uintptr {
	if m == nil {
		return 0
	}
	return reflect.ValueOf(m).Pointer()
}

// Accept pins def in place of whatever was pinned for its tool, so its
// calls go on. It returns the new pin.
func (p *Pins) Accept(def tool.Tool) (Pin, error) {
	if p == nil || p.o.Dir == "" {
		return Pin{}, errors.New("pinning: no data directory to keep pins in")
	}
	canon, err := Canonical(def)
	if err != nil {
		return Pin{}, err
	}
	pin := p.newPin(def, canon, sha(canon))
	pin.Accepted = true
	if err := p.replace(pin); err != nil {
		return Pin{}, err
	}
	p.mu.Lock()
	delete(p.cache, pinKey{def.Server, def.Name})
	p.mu.Unlock()
	// What Shown made may show the tool by a pin that is no longer the
	// one kept, or by none where there is now one to show it by.
	p.shown.Store(nil)
	return pin, nil
}

// replace writes pin in place of its tool's pin, durably (a person's
// acceptance must not be lost): written aside, synced, renamed into
// place, so a reader in another process sees the old pin or the new one,
// never a part.
func (p *Pins) replace(pin Pin) error {
	b, err := json.Marshal(pin)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(p.o.Dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(p.o.Dir, ".accept-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(b)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp.Name(), p.path(pinKey{pin.Server, pin.Tool}))
}

// Pins returns every pin kept, sorted by server and tool; files that are
// not pins are skipped.
func (p *Pins) Pins() ([]Pin, error) {
	if p == nil || p.o.Dir == "" {
		return nil, nil
	}
	des, err := os.ReadDir(p.o.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Pin
	for _, de := range des {
		if !strings.HasSuffix(de.Name(), ".json") || strings.HasPrefix(de.Name(), ".") {
			continue
		}
		pin, err := readPin(filepath.Join(p.o.Dir, de.Name()))
		if err != nil {
			continue
		}
		out = append(out, pin)
	}
	slices.SortFunc(out, func(a, b Pin) int {
		return strings.Compare(a.Server+"\x00"+a.Tool, b.Server+"\x00"+b.Tool)
	})
	return out, nil
}

// path is the file of a tool's pin: a hash of its identity, since server
// and tool names may hold any character.
func (p *Pins) path(k pinKey) string {
	h := sha256.Sum256([]byte(k.server + "\x00" + k.tool))
	return filepath.Join(p.o.Dir, hex.EncodeToString(h[:16])+".json")
}

func (p *Pins) read(k pinKey) (Pin, error) {
	pin, err := readPin(p.path(k))
	if err == nil && (pin.Server != k.server || pin.Tool != k.tool) {
		return Pin{}, fmt.Errorf("pinning: %s holds the pin of %s/%s", p.path(k), pin.Server, pin.Tool)
	}
	return pin, err
}

// errPinCorrupt is a pin file that does not parse.
var errPinCorrupt = errors.New("pinning: not a pin")

func readPin(path string) (Pin, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Pin{}, err
	}
	var pin Pin
	if err := json.Unmarshal(b, &pin); err != nil || pin.SHA256 == "" {
		return Pin{}, fmt.Errorf("%w: %s: %v", errPinCorrupt, path, err)
	}
	return pin, nil
}

func (p *Pins) newPin(def tool.Tool, canon []byte, sum string) Pin {
	pin := Pin{Server: def.Server, Tool: def.Name, SHA256: sum, Size: len(canon), PinnedAt: time.Now().UTC()}
	if len(canon) <= p.o.MaxDefinitionBytes {
		pin.Definition = canon
	}
	return pin
}

// create pins def, unless another process pinned the tool first: the file
// is written aside, then linked into place, which fails if one exists;
// then the pin in place (whoever made it) is the one returned.
func (p *Pins) create(def tool.Tool, canon []byte, sum string) (Pin, error) {
	pin := p.newPin(def, canon, sum)
	b, err := json.Marshal(pin)
	if err != nil {
		return Pin{}, err
	}
	if err := os.MkdirAll(p.o.Dir, 0o700); err != nil {
		return Pin{}, err
	}
	tmp, err := os.CreateTemp(p.o.Dir, ".new-*")
	if err != nil {
		return Pin{}, err
	}
	defer os.Remove(tmp.Name())
	// Not synced: a first pin lost to a crash is made again at the next
	// sight, and one cut short by it is replaced (errPinCorrupt); a
	// thousand tools seen at once must not cost a thousand fsyncs.
	_, err = tmp.Write(b)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return Pin{}, err
	}
	k := pinKey{def.Server, def.Name}
	if err := os.Link(tmp.Name(), p.path(k)); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return p.read(k)
		}
		return Pin{}, err
	}
	return pin, nil
}

// pinned is the part of a definition a pin fingerprints.
type pinned struct {
	Name        string           `json:"name"`
	Description string           `json:"description"`
	InputSchema map[string]any   `json:"input_schema"`
	Annotations tool.Annotations `json:"annotations"`
}

// Canonical returns the canonical JSON of the parts of def a pin covers:
// name, description, input schema and annotations, object keys sorted
// (encoding/json sorts map keys), no insignificant space.
func Canonical(def tool.Tool) ([]byte, error) {
	return json.Marshal(pinned{Name: def.Name, Description: def.Description, InputSchema: def.InputSchema, Annotations: def.Annotations})
}

func sha(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// pinDiff describes how canon differs from the pinned definition: a line
// diff of both, indented, one field per top-level key.
func pinDiff(pin Pin, canon []byte) string {
	if pin.Definition == nil {
		return fmt.Sprintf("(the pinned definition, %d bytes, was too large to keep; only its hash is known)", pin.Size)
	}
	d := LineDiff(indentJSON(pin.Definition), indentJSON(canon))
	if len(d) > maxDiffBytes {
		// The message goes to models and records: its head says enough
		// to hold the tool; the definitions are in the pin and the
		// server's listing.
		cut := maxDiffBytes
		for cut > 0 && !utf8.RuneStart(d[cut]) {
			cut--
		}
		d = fmt.Sprintf("%s\n… (%d more bytes of difference)", d[:cut], len(d)-cut)
	}
	return d
}

// changedParts names the parts of the canonical definition (its top-level
// keys) that differ between the pin and canon; nil when the pin kept no
// definition.
func changedParts(pin Pin, canon []byte) []string {
	var was, now map[string]json.RawMessage
	if pin.Definition == nil || json.Unmarshal(pin.Definition, &was) != nil || json.Unmarshal(canon, &now) != nil {
		return nil
	}
	var out []string
	for _, k := range []string{"name", "description", "input_schema", "annotations"} {
		if !bytes.Equal(was[k], now[k]) {
			out = append(out, k)
		}
	}
	return out
}

// maxDiffBytes bounds the difference a message carries.
const maxDiffBytes = 16 << 10

func indentJSON(b []byte) []string {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return strings.Split(string(b), "\n")
	}
	out, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return strings.Split(string(b), "\n")
	}
	return strings.Split(string(out), "\n")
}

// LineDiff returns the lines of a and b that differ, "- " for a's and
// "+ " for b's, with the line before each change for context, by a longest
// common subsequence; over maxDiffLines lines it lists the lines of each
// that the other lacks.
func LineDiff(a, b []string) string {
	// Common prefix and suffix first: a changed description leaves most
	// of a definition alone.
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	am, bm := a[pre:len(a)-suf], b[pre:len(b)-suf]
	var out strings.Builder
	if pre > 0 {
		out.WriteString("  " + a[pre-1] + "\n")
	}
	if len(am) > maxDiffLines || len(bm) > maxDiffLines {
		for _, l := range am {
			out.WriteString("- " + l + "\n")
		}
		for _, l := range bm {
			out.WriteString("+ " + l + "\n")
		}
		return strings.TrimRight(out.String(), "\n")
	}
	// lcs[i][j]: the longest common subsequence of am[i:] and bm[j:].
	lcs := make([][]int, len(am)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(bm)+1)
	}
	for i := len(am) - 1; i >= 0; i-- {
		for j := len(bm) - 1; j >= 0; j-- {
			if am[i] == bm[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	i, j := 0, 0
	for i < len(am) || j < len(bm) {
		switch {
		case i < len(am) && j < len(bm) && am[i] == bm[j]:
			out.WriteString("  " + am[i] + "\n")
			i++
			j++
		case i < len(am) && (j == len(bm) || lcs[i+1][j] >= lcs[i][j+1]):
			out.WriteString("- " + am[i] + "\n")
			i++
		default:
			out.WriteString("+ " + bm[j] + "\n")
			j++
		}
	}
	return strings.TrimRight(out.String(), "\n")
}
