package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"
)

// SaveRule adds r to the rules of the policy section of the YAML
// configuration file at path, creating the section, or the file, if
// missing. Package policy saves the rules of "always" answers with it
// (policy.SaveRule checks the rule first; see policy.WithPersist).
//
// The rest of the file is kept as it is, comments and layout included:
// the rule is inserted as one line at the end of policy.rules (or a new
// section at the end of the file). Only when the file's layout makes that
// impossible (flow-style or empty policy sections, for instance) is the
// file rewritten from its parsed form, which keeps every value and most
// comments but not blank lines. Either way the result is checked to hold
// exactly the old content plus the rule before it replaces the file, which
// it does atomically (a temporary file renamed over it; a symbolic link is
// followed, not replaced). A rule the file already has is not added again.
//
// A file Load reads as JSON (the mcpServers format) is refused: writing
// YAML into it would break the other programs that read it. r.Line is not
// saved.
func SaveRule(path string, r PolicyRule) error {
	saveMu.Lock()
	defer saveMu.Unlock()
	target, err := filepath.EvalSymlinks(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		target = path
	case err != nil:
		return fmt.Errorf("policy: saving a rule to %s: %w", path, err)
	}
	data, err := os.ReadFile(target)
	perm := fs.FileMode(0o644)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		data = nil
	case err != nil:
		return fmt.Errorf("policy: saving a rule to %s: %w", path, err)
	default:
		if fi, err := os.Stat(target); err == nil {
			perm = fi.Mode().Perm()
		}
	}
	if isJSONFile(target, data) {
		return fmt.Errorf("policy: %s is a JSON file; add the rule by hand, in a toolmux.yaml: policy: {rules: [%s]}", path, flowRule(r))
	}
	out, err := addRule(data, r)
	if err != nil {
		return fmt.Errorf("policy: saving a rule to %s: %w", path, err)
	}
	if out == nil {
		return nil // already there
	}
	if err := writeAtomic(target, out, perm); err != nil {
		return fmt.Errorf("policy: saving a rule to %s: %w", path, err)
	}
	return nil
}

// saveMu makes SaveRule's read-modify-write of a file atomic within the
// process: the gates of a task's sub-agents share one configuration file,
// and two "always" answers saved at once must not lose one of the rules.
// (Other processes editing the file at the same moment are not guarded
// against.)
var saveMu sync.Mutex

// isJSONFile tells whether Load reads the file as JSON: by its name, or
// by content that starts like JSON and is JSON (a YAML flow mapping that
// is not JSON is YAML), as parser.document decides.
func isJSONFile(name string, data []byte) bool {
	if jsonByName(name) {
		return true
	}
	if !looksLikeJSON(data) {
		return false
	}
	_, err := parseJSON(data)
	return err == nil
}

// jsonByName reports whether a file's name says it is JSON, whatever it
// holds.
func jsonByName(name string) bool {
	ext := strings.ToLower(filepath.Ext(name))
	return ext == ".json" || ext == ".jsonc"
}

// looksLikeJSON reports whether data starts as a JSON object or array
// does: Load then tries JSON first.
func looksLikeJSON(data []byte) bool {
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	return len(trimmed) > 0 && (trimmed[0] == '{' || trimmed[0] == '[')
}

// addRule returns data with r added, or nil if data already has r.
func addRule(data []byte, r PolicyRule) ([]byte, error) {
	var before any
	if err := yaml.Unmarshal(data, &before); err != nil {
		return nil, fmt.Errorf("not valid YAML, so not edited: %v", err)
	}
	want := ruleValue(r)
	if rules, ok := lookupRules(before); ok {
		for _, x := range rules {
			if reflect.DeepEqual(x, want) {
				return nil, nil
			}
		}
	}
	expected, err := withRule(data, want)
	if err != nil {
		return nil, err
	}
	check := func(out []byte) bool {
		var got any
		return yaml.Unmarshal(out, &got) == nil && reflect.DeepEqual(got, expected)
	}
	if out, ok := splice(data, r); ok && check(out) {
		return out, nil
	}
	out, err := rewrite(data, r)
	if err != nil {
		return nil, err
	}
	if !check(out) {
		return nil, errors.New("could not add the rule without changing the rest of the file; add it by hand: " + flowRule(r))
	}
	return out, nil
}

// lookupRules returns policy.rules of a decoded document.
func lookupRules(doc any) ([]any, bool) {
	root, ok := doc.(map[string]any)
	if !ok {
		return nil, false
	}
	pol, ok := root["policy"].(map[string]any)
	if !ok {
		return nil, false
	}
	rules, ok := pol["rules"].([]any)
	return rules, ok
}

// withRule decodes data and adds rule to it, as the edited file must read.
func withRule(data []byte, rule map[string]any) (any, error) {
	var doc any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	if doc == nil {
		doc = map[string]any{}
	}
	root, ok := doc.(map[string]any)
	if !ok {
		return nil, errors.New("the file is not a mapping of settings")
	}
	var pol map[string]any
	switch p := root["policy"].(type) {
	case nil:
		pol = map[string]any{}
		root["policy"] = pol
	case map[string]any:
		pol = p
	default:
		return nil, errors.New("policy is not a mapping")
	}
	switch rs := pol["rules"].(type) {
	case nil:
		pol["rules"] = []any{rule}
	case []any:
		pol["rules"] = append(rs, rule)
	default:
		return nil, errors.New("policy.rules is not a list")
	}
	return doc, nil
}

// ruleValue is r as yaml.v3 decodes the line flowRule writes.
func ruleValue(r PolicyRule) map[string]any {
	m := map[string]any{}
	for _, kv := range ruleFields(r) {
		m[kv.key] = kv.value
	}
	return m
}

type field struct {
	key   string
	value any // string, []any of strings, map[string]any of strings, bool or int
}

// ruleFields lists the fields of r that are set, in the order of the
// documentation. Strings are escaped for config's variable expansion, so
// a "$" in a tool name or pattern stays a "$".
func ruleFields(r PolicyRule) []field {
	esc := func(s string) string { return strings.ReplaceAll(s, "$", "$$") }
	var fs []field
	if r.Name != "" {
		fs = append(fs, field{"name", esc(r.Name)})
	}
	if len(r.Tools) > 0 {
		l := make([]any, len(r.Tools))
		for i, t := range r.Tools {
			l[i] = esc(t)
		}
		fs = append(fs, field{"tools", l})
	}
	if r.Server != "" {
		fs = append(fs, field{"server", esc(r.Server)})
	}
	if len(r.Args) > 0 {
		m := make(map[string]any, len(r.Args))
		for k, v := range r.Args {
			m[k] = esc(v)
		}
		fs = append(fs, field{"args", m})
	}
	if r.ReadOnly != nil {
		fs = append(fs, field{"read_only", *r.ReadOnly})
	}
	if r.Destructive != nil {
		fs = append(fs, field{"destructive", *r.Destructive})
	}
	for _, list := range []struct {
		key    string
		values []string
	}{{"callers", r.Callers}, {"groups", r.Groups}} {
		if len(list.values) > 0 {
			l := make([]any, len(list.values))
			for i, v := range list.values {
				l[i] = esc(v)
			}
			fs = append(fs, field{list.key, l})
		}
	}
	if len(r.Modes) > 0 {
		l := make([]any, len(r.Modes))
		for i, m := range r.Modes {
			l[i] = m
		}
		fs = append(fs, field{"modes", l})
	}
	fs = append(fs, field{"action", r.Action})
	if r.Priority != 0 {
		fs = append(fs, field{"priority", r.Priority})
	}
	if r.Message != "" {
		fs = append(fs, field{"message", esc(r.Message)})
	}
	return fs
}

// ruleNode is r as a flow mapping node.
func ruleNode(r PolicyRule) *yaml.Node {
	str := func(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s} }
	n := &yaml.Node{Kind: yaml.MappingNode, Style: yaml.FlowStyle}
	for _, f := range ruleFields(r) {
		var v *yaml.Node
		switch x := f.value.(type) {
		case string:
			v = str(x)
		case bool:
			v = &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(x)}
		case int:
			v = &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.Itoa(x)}
		case []any:
			v = &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
			for _, s := range x {
				v.Content = append(v.Content, str(s.(string)))
			}
		case map[string]any:
			v = &yaml.Node{Kind: yaml.MappingNode, Style: yaml.FlowStyle}
			keys := make([]string, 0, len(x))
			for k := range x {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for _, k := range keys {
				v.Content = append(v.Content, str(k), str(x[k].(string)))
			}
		}
		n.Content = append(n.Content, str(f.key), v)
	}
	return n
}

// flowRule renders r on one line: {tools: [a/b], action: allow}.
func flowRule(r PolicyRule) string {
	out, err := yaml.Marshal(ruleNode(r))
	s := strings.TrimSuffix(string(out), "\n")
	if err != nil || strings.Contains(s, "\n") {
		// Not expected of yaml.v3, which does not wrap lines; JSON is
		// YAML too, and always fits on one line.
		var b strings.Builder
		b.WriteString("{")
		for i, f := range ruleFields(r) {
			if i > 0 {
				b.WriteString(", ")
			}
			j, _ := json.Marshal(f.value)
			b.WriteString(f.key + ": " + string(j))
		}
		b.WriteString("}")
		return b.String()
	}
	return s
}

// splice inserts the rule as text, leaving every other byte of data as it
// was. ok is false when the layout calls for a rewrite instead.
func splice(data []byte, r PolicyRule) ([]byte, bool) {
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) != nil {
		return nil, false
	}
	nl := "\n"
	if bytes.Contains(data, []byte("\r\n")) {
		nl = "\r\n"
	}
	item := "- " + flowRule(r) + nl
	lines := splitLines(data)
	var root *yaml.Node
	if len(doc.Content) > 0 {
		root = doc.Content[0]
	}
	if root == nil || root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return appendText(data, nl, "policy:"+nl+"  rules:"+nl+"    "+item), true
	}
	if root.Kind != yaml.MappingNode || root.Style&yaml.FlowStyle != 0 || len(root.Content) == 0 {
		return nil, false
	}
	indent := strings.Repeat(" ", root.Content[0].Column-1)
	pi := keyIndex(root, "policy")
	if pi < 0 {
		return appendText(data, nl, indent+"policy:"+nl+indent+"  rules:"+nl+indent+"    "+item), true
	}
	pol := root.Content[pi+1]
	if pol.Kind != yaml.MappingNode || pol.Style&yaml.FlowStyle != 0 || len(pol.Content) == 0 {
		return nil, false
	}
	polEnd := nextKeyLine(root, pi) // the line after the policy section, 0 at the end
	pIndent := strings.Repeat(" ", pol.Content[0].Column-1)
	ri := keyIndex(pol, "rules")
	if ri < 0 {
		return insertBefore(lines, polEnd, len(pIndent), pIndent+"rules:"+nl+pIndent+"  "+item), true
	}
	rules := pol.Content[ri+1]
	if rules.Kind != yaml.SequenceNode || rules.Style&yaml.FlowStyle != 0 || len(rules.Content) == 0 {
		return nil, false
	}
	end := nextKeyLine(pol, ri)
	if end == 0 {
		end = polEnd
	}
	dIndent := strings.Repeat(" ", rules.Column-1)
	return insertBefore(lines, end, len(dIndent), dIndent+item), true
}

func keyIndex(m *yaml.Node, key string) int {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if k := m.Content[i]; k.Kind == yaml.ScalarNode && k.Value == key {
			return i
		}
	}
	return -1
}

// nextKeyLine returns the line of the key after the i-th key of m, 0 if
// it is the last.
func nextKeyLine(m *yaml.Node, i int) int {
	if i+2 < len(m.Content) {
		return m.Content[i+2].Line
	}
	return 0
}

func appendText(data []byte, nl, text string) []byte {
	out := slices.Clip(data)
	if len(out) > 0 && !bytes.HasSuffix(out, []byte("\n")) {
		out = append(out, nl...)
	}
	return append(out, text...)
}

// insertBefore inserts text before line (1-based; 0 means the end), moved
// up past the blank lines and the comments indented less than indent that
// precede it: those belong to what follows.
func insertBefore(lines [][]byte, line, indent int, text string) []byte {
	at := len(lines)
	if line > 0 {
		at = line - 1
	}
	for at > 0 {
		l := bytes.TrimRight(lines[at-1], "\r\n")
		body := bytes.TrimLeft(l, " ")
		if len(bytes.TrimSpace(body)) == 0 || body[0] == '#' && len(l)-len(body) < indent {
			at--
			continue
		}
		break
	}
	var out []byte
	for _, l := range lines[:at] {
		out = append(out, l...)
	}
	if at > 0 && !bytes.HasSuffix(out, []byte("\n")) {
		out = append(out, '\n')
	}
	out = append(out, text...)
	for _, l := range lines[at:] {
		out = append(out, l...)
	}
	return out
}

// splitLines splits data after each newline.
func splitLines(data []byte) [][]byte {
	var lines [][]byte
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			lines = append(lines, data)
			break
		}
		lines = append(lines, data[:i+1])
		data = data[i+1:]
	}
	return lines
}

// rewrite adds the rule through the parsed document and encodes it again.
func rewrite(data []byte, r PolicyRule) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	str := func(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s} }
	isNull := func(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!null" }
	if len(doc.Content) == 0 {
		doc = yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{{Kind: yaml.MappingNode}}}
	}
	root := doc.Content[0]
	if isNull(root) {
		*root = yaml.Node{Kind: yaml.MappingNode, HeadComment: root.HeadComment, FootComment: root.FootComment}
	}
	if root.Kind != yaml.MappingNode {
		return nil, errors.New("the file is not a mapping of settings")
	}
	mapping := func(parent *yaml.Node, key string, kind yaml.Kind) (*yaml.Node, error) {
		i := keyIndex(parent, key)
		if i < 0 {
			n := &yaml.Node{Kind: kind}
			parent.Content = append(parent.Content, str(key), n)
			return n, nil
		}
		n := parent.Content[i+1]
		if isNull(n) {
			*n = yaml.Node{Kind: kind, LineComment: n.LineComment}
		}
		if n.Kind != kind {
			return nil, fmt.Errorf("%s is not a %s", key, map[yaml.Kind]string{yaml.MappingNode: "mapping", yaml.SequenceNode: "list"}[kind])
		}
		return n, nil
	}
	pol, err := mapping(root, "policy", yaml.MappingNode)
	if err != nil {
		return nil, err
	}
	rules, err := mapping(pol, "rules", yaml.SequenceNode)
	if err != nil {
		return nil, err
	}
	rules.Content = append(rules.Content, ruleNode(r))
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// writeAtomic replaces the file at path with data: written to a temporary
// file in the same directory, synced, then renamed over it, so a reader
// (or a crash) sees the old file or the new one, never a mix.
func writeAtomic(path string, data []byte, perm fs.FileMode) error {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // fails harmlessly once renamed
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
