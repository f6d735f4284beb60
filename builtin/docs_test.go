package builtin_test

import (
	"bufio"
	"context"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolmux/toolmux/builtin"
	"github.com/toolmux/toolmux/web"
)

// docsPath is the reference of the built-in tools.
const docsPath = "../docs/builtin.md"

// docSection is what docs/builtin.md says about one tool: the text of its
// "### name" section and the first ```json block in it, the example.
type docSection struct {
	text    string
	example string
}

// readDocs splits docs/builtin.md into sections by "### " headings. The
// convention is one "### tool_name" section per tool, whose first fenced
// ```json block holds the example arguments.
func readDocs(t *testing.T) map[string]*docSection {
	t.Helper()
	f, err := os.Open(docsPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sections := map[string]*docSection{}
	var cur *docSection
	var inJSON, seenJSON bool
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "### "):
			cur = &docSection{}
			sections[strings.TrimSpace(strings.TrimPrefix(line, "### "))] = cur
			seenJSON = false
			continue
		case strings.HasPrefix(line, "## "):
			cur = nil
			continue
		case cur == nil:
			continue
		case line == "```json" && !seenJSON:
			inJSON, seenJSON = true, true
			continue
		case inJSON && line == "```":
			inJSON = false
			continue
		case inJSON:
			cur.example += line + "\n"
			continue
		}
		cur.text += line + "\n"
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return sections
}

// docWorkspace prepares the workspace the examples are written for.
func docWorkspace(t *testing.T) string {
	root := t.TempDir()
	write(t, root, "README.md", "# demo\n")
	write(t, root, "src/main.go", "package main\n\nfunc main() {\n\tprintln(\"hello\")\n}\n")
	return root
}

// TestDocsExamples runs the example of every tool in docs/builtin.md
// against a real source, each on a fresh workspace, and checks that the
// section documents every argument of the tool.
func TestDocsExamples(t *testing.T) {
	sections := readDocs(t)
	search, err := web.NewSearcher("searxng", "http://127.0.0.1:1", "")
	if err != nil {
		t.Fatal(err)
	}
	tools, err := newSource(t, t.TempDir(), builtin.WithSearcher(search)).Tools(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range tools {
		t.Run(tl.Name, func(t *testing.T) {
			sec, ok := sections[tl.Name]
			if !ok {
				t.Fatalf("docs/builtin.md has no section \"### %s\"", tl.Name)
			}
			for arg := range tl.InputSchema["properties"].(map[string]any) {
				if !strings.Contains(sec.text, "`"+arg+"`") {
					t.Errorf("the section does not document the argument `%s`", arg)
				}
			}
			if sec.example == "" {
				t.Fatal("the section has no ```json example")
			}
			var args map[string]any
			if err := json.Unmarshal([]byte(sec.example), &args); err != nil {
				t.Fatalf("the example is not a JSON object: %v\n%s", err, sec.example)
			}
			if tl.Name == builtin.WebFetch || tl.Name == builtin.WebSearch {
				// These reach the network: package web runs the same
				// examples (docs/web.md) against local servers. Here the
				// example must fit the tool's schema.
				props := tl.InputSchema["properties"].(map[string]any)
				for k := range args {
					if _, ok := props[k]; !ok {
						t.Errorf("the example has the argument %q, which %s does not take", k, tl.Name)
					}
				}
				for _, r := range tl.InputSchema["required"].([]string) {
					if _, ok := args[r]; !ok {
						t.Errorf("the example lacks the required argument %q", r)
					}
				}
				return
			}
			root := docWorkspace(t)
			s := newSource(t, root, builtin.WithSpillDir(filepath.Join(t.TempDir(), "spill")), builtin.WithMemoryDir(filepath.Join(t.TempDir(), "memory")))
			res, err := s.Call(context.Background(), tl.Name, args)
			if err != nil {
				t.Fatalf("example %s failed: %v", strings.TrimSpace(sec.example), err)
			}
			if res.IsError {
				t.Fatalf("example %s reported an error:\n%s", strings.TrimSpace(sec.example), res.Text())
			}
			// An example that finds nothing shows nothing.
			if got := res.Text(); strings.HasPrefix(got, "No ") {
				t.Errorf("example %s found nothing: %s", strings.TrimSpace(sec.example), got)
			}
		})
	}
	for name := range sections {
		found := false
		for _, tl := range tools {
			found = found || tl.Name == name
		}
		if !found {
			t.Errorf("docs/builtin.md has a section for %q, which is not a tool", name)
		}
	}
}

// TestDocsOptions checks that docs/builtin.md names every option of New.
func TestDocsOptions(t *testing.T) {
	docs, err := os.ReadFile(docsPath)
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	n := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !fn.Name.IsExported() || fn.Type.Results == nil || len(fn.Type.Results.List) != 1 {
				continue
			}
			if id, ok := fn.Type.Results.List[0].Type.(*ast.Ident); !ok || id.Name != "Option" {
				continue
			}
			n++
			if !strings.Contains(string(docs), "`"+fn.Name.Name+"(") {
				t.Errorf("docs/builtin.md does not document the option %s", fn.Name.Name)
			}
		}
	}
	if n < 10 {
		t.Errorf("found only %d options; is the parser looking at the right files?", n)
	}
}
