package main_test

import (
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var updateCLIDoc = flag.Bool("update-cli-doc", false, "rewrite docs/cli.md's copies of the commands' help from the commands themselves")

// cliDoc is the CLI reference, whose copies of each command's help this
// file keeps true.
const cliDoc = "../../docs/cli.md"

// helpBlock is the copy of a command's --help in docs/cli.md: between
// its marker and the end marker, the help as the command prints it.
var helpBlock = regexp.MustCompile("(?s)<!-- help: (toolmux[a-z -]*) -->\n```text\n(.*?)```\n<!-- end help -->")

// commandHelps is the help of every command of toolmux, by the command
// line that names it, the commands found as their help lists them (each
// "Available Commands" section, recursively) but the ones cobra adds
// (help, completion).
func commandHelps(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	queue := [][]string{{}}
	for len(queue) > 0 {
		path := queue[0]
		queue = queue[1:]
		r := toolmux(t, dir, "", append(path, "--help")...)
		if r.code != 0 {
			t.Fatalf("toolmux %s --help: exit %d: %s", strings.Join(path, " "), r.code, r.stderr)
		}
		out[strings.TrimSpace("toolmux "+strings.Join(path, " "))] = r.stdout
		_, list, ok := strings.Cut(r.stdout, "\nAvailable Commands:\n")
		if !ok {
			continue
		}
		list, _, _ = strings.Cut(list, "\n\n")
		for line := range strings.SplitSeq(list, "\n") {
			name := strings.Fields(line)[0]
			if name != "help" && name != "completion" {
				queue = append(queue, append(append([]string(nil), path...), name))
			}
		}
	}
	return out
}

// docs/cli.md holds the help of every command, as the command prints it,
// and of no command that is gone: the reference cannot drift from the
// binary. (go test ./cmd/toolmux -run TestCLIReferenceIsTheHelp
// -update-cli-doc rewrites the copies after a change of help; a new
// command's block is added at the end, to be moved to its place.)
func TestCLIReferenceIsTheHelp(t *testing.T) {
	dir := t.TempDir()
	b, err := os.ReadFile(cliDoc)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	documented := map[string]string{}
	for _, m := range helpBlock.FindAllStringSubmatch(doc, -1) {
		documented[m[1]] = m[2]
	}
	commands := commandHelps(t, dir)
	for _, name := range slices.Sorted(maps.Keys(commands)) {
		help := commands[name]
		got, ok := documented[name]
		switch {
		case got == help:
		case *updateCLIDoc && ok:
			doc = strings.Replace(doc, "<!-- help: "+name+" -->\n```text\n"+got, "<!-- help: "+name+" -->\n```text\n"+help, 1)
		case *updateCLIDoc:
			doc += "\n### " + name + "\n\n<!-- help: " + name + " -->\n```text\n" + help + "```\n<!-- end help -->\n"
		case !ok:
			t.Errorf("docs/cli.md has no copy of the help of %s", name)
		default:
			t.Errorf("docs/cli.md's copy of the help of %s is not what it prints:\n%s", name, help)
		}
	}
	for name := range documented {
		if _, ok := commands[name]; !ok {
			t.Errorf("docs/cli.md has the help of %s, which is no command", name)
		}
	}
	if *updateCLIDoc {
		if err := os.WriteFile(cliDoc, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// sampleBlock is a sample of a command's output in the docs: between its
// markers, fenced blocks whose lines starting with "$ " are the commands
// and whose other lines are what they print on stdout, in order.
var sampleBlock = regexp.MustCompile("(?s)<!-- sample: ([a-z-]+) -->\n(.*?)<!-- end sample -->")

var fenced = regexp.MustCompile("(?s)```[a-z]*\n(.*?)```")

// varying are the parts of an output that differ from run to run (a
// record's ids and times), replaced by their names before comparing.
var varying = []*regexp.Regexp{
	regexp.MustCompile(`"(id|task)": "[0-9a-z]{26}"`),
	regexp.MustCompile(`"(started_at|ended_at)": "[^"]+"`),
	regexp.MustCompile(`"(duration_ms)": [0-9.e+-]+`),
}

func normalise(s string) string {
	for _, re := range varying {
		s = re.ReplaceAllString(s, `"$1": ...`)
	}
	return s
}

// The samples of output in the README and docs/cli.md are what their
// commands print, run as shown in an empty directory.
func TestDocSamplesAreTheCommandsOutput(t *testing.T) {
	n := 0
	for _, file := range []string{"../../README.md", cliDoc} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range sampleBlock.FindAllStringSubmatch(string(b), -1) {
			n++
			t.Run(m[1], func(t *testing.T) {
				var commands []string
				var want strings.Builder
				for _, f := range fenced.FindAllStringSubmatch(m[2], -1) {
					for line := range strings.SplitSeq(strings.TrimSuffix(f[1], "\n"), "\n") {
						if c, ok := strings.CutPrefix(line, "$ "); ok {
							commands = append(commands, c)
						} else {
							want.WriteString(line + "\n")
						}
					}
				}
				dir := t.TempDir()
				cmd := exec.Command("bash", "-e", "-c", strings.Join(commands, "\n"))
				cmd.Dir = dir
				cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(binary)+":"+os.Getenv("PATH"), "XDG_DATA_HOME="+t.TempDir())
				out, err := cmd.Output()
				if err != nil {
					t.Fatalf("%s: %v", strings.Join(commands, "; "), err)
				}
				if got := normalise(string(out)); got != normalise(want.String()) {
					t.Errorf("%s prints\n%s\nnot what %s shows:\n%s", strings.Join(commands, "; "), out, file, want.String())
				}
			})
		}
	}
	if n < 2 {
		t.Fatalf("%d samples found", n)
	}
}

var (
	mdLink    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	mdFence   = regexp.MustCompile("(?s)```.*?```")
	mdHeading = regexp.MustCompile(`(?m)^#{1,6} (.*)$`)
	mdAnchor  = regexp.MustCompile(`<a (?:id|name)="([^"]+)"`)
	notSlug   = regexp.MustCompile(`[^\p{L}\p{N}_\- ]`)
)

// anchors are the targets of links into a Markdown file: its headings as
// GitHub names them (lower case, punctuation dropped, spaces as hyphens,
// a repeated one numbered) and its explicit anchors.
func anchors(text string) map[string]bool {
	text = mdFence.ReplaceAllString(text, "")
	out := map[string]bool{}
	seen := map[string]int{}
	for _, m := range mdHeading.FindAllStringSubmatch(text, -1) {
		s := strings.ReplaceAll(notSlug.ReplaceAllString(strings.ToLower(strings.TrimSpace(m[1])), ""), " ", "-")
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	for _, m := range mdAnchor.FindAllStringSubmatch(text, -1) {
		out[m[1]] = true
	}
	return out
}

// Every relative link of the README, BENCHMARKS.md and docs/ leads to a
// file that exists and, into a Markdown file, to a heading it has.
func TestDocLinks(t *testing.T) {
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../../README.md", "../../BENCHMARKS.md")
	links := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(mdFence.ReplaceAllString(string(b), ""), -1) {
			target := m[1]
			if strings.Contains(target, ":") && !strings.HasPrefix(target, "#") {
				continue // a URL
			}
			links++
			path, anchor, _ := strings.Cut(target, "#")
			dest := f
			if path != "" {
				dest = filepath.Join(filepath.Dir(f), path)
			}
			text, err := os.ReadFile(dest)
			if err != nil {
				if _, serr := os.Stat(dest); serr != nil {
					t.Errorf("%s: link %s: no such file", f, target)
				}
				continue // a directory
			}
			if anchor != "" && strings.HasSuffix(dest, ".md") && !anchors(string(text))[anchor] {
				t.Errorf("%s: link %s: no such heading", f, target)
			}
		}
	}
	if links < 100 {
		t.Fatalf("only %d links found", links)
	}
}
