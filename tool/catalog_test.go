package tool_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/toolmux/toolmux/tool"
)

func sampleTools() []tool.Tool {
	return []tool.Tool{
		{Server: "fs", Name: "write_file"},
		{Server: "builtin", Name: "read_file", Description: "reads"},
		{Server: "git", Name: "status"},
		{Server: "builtin", Name: "list_dir"},
		{Server: "fs", Name: "read_file"},
		{Server: "builtin", Name: "grep"},
	}
}

func sampleServers() []tool.ServerHealth {
	return []tool.ServerHealth{
		{Name: "builtin", State: tool.StateReady, Tools: 99},
		{Name: "fs", State: tool.StateDegraded, Error: "slow"},
		{Name: "git", State: tool.StateReady},
		{Name: "empty", State: tool.StateFailed, Tools: 7},
	}
}

func identity(t tool.Tool) string { return t.Server + "/" + t.Name }

func TestCatalogOrderAndExposedNames(t *testing.T) {
	c := tool.NewCatalog(sampleTools(), sampleServers())
	if c.Len() != 6 {
		t.Fatalf("Len = %d, want 6", c.Len())
	}
	var got []string
	for _, tl := range c.Tools() {
		got = append(got, identity(tl)+"="+tl.Exposed)
	}
	want := []string{
		"builtin/grep=builtin__grep",
		"builtin/list_dir=builtin__list_dir",
		"builtin/read_file=builtin__read_file",
		"fs/read_file=fs__read_file",
		"fs/write_file=fs__write_file",
		"git/status=git__status",
	}
	if !slices.Equal(got, want) {
		t.Errorf("tools =\n%v\nwant\n%v", got, want)
	}
	if len(c.Collisions()) != 0 {
		t.Errorf("unexpected collisions: %+v", c.Collisions())
	}
}

func TestCatalogDoesNotMutateInputs(t *testing.T) {
	tools := sampleTools()
	tools[0].Exposed = "stale"
	servers := sampleServers()
	origTools := slices.Clone(tools)
	origServers := slices.Clone(servers)
	c := tool.NewCatalog(tools, servers)
	if !reflect.DeepEqual(tools, origTools) {
		t.Error("NewCatalog modified its tools argument")
	}
	if !reflect.DeepEqual(servers, origServers) {
		t.Error("NewCatalog modified its servers argument")
	}
	if tl, _ := c.Find("fs", "write_file"); tl.Exposed != "fs__write_file" {
		t.Errorf("a preset Exposed was kept: %q", tl.Exposed)
	}
	if _, ok := c.Lookup("stale"); ok {
		t.Error("a preset Exposed name is reachable")
	}
}

func TestCatalogLookupAndFind(t *testing.T) {
	c := tool.NewCatalog(sampleTools(), nil)
	for _, tl := range c.Tools() {
		got, ok := c.Lookup(tl.Exposed)
		if !ok || !reflect.DeepEqual(got, tl) {
			t.Errorf("Lookup(%q) = %+v, %v", tl.Exposed, got, ok)
		}
		got, ok = c.Find(tl.Server, tl.Name)
		if !ok || !reflect.DeepEqual(got, tl) {
			t.Errorf("Find(%q, %q) = %+v, %v", tl.Server, tl.Name, got, ok)
		}
	}
	if tl, ok := c.Lookup("builtin__read_file"); !ok || tl.Description != "reads" || tl.Server != "builtin" {
		t.Errorf("Lookup(builtin__read_file) = %+v, %v", tl, ok)
	}
	for _, miss := range []string{"", "read_file", "builtin__nope", "BUILTIN__READ_FILE", "builtin/read_file"} {
		if tl, ok := c.Lookup(miss); ok || !reflect.DeepEqual(tl, tool.Tool{}) {
			t.Errorf("Lookup(%q) = %+v, %v; want miss", miss, tl, ok)
		}
	}
	if tl, ok := c.Find("fs", "grep"); ok || !reflect.DeepEqual(tl, tool.Tool{}) {
		t.Errorf("Find(fs, grep) = %+v, %v", tl, ok)
	}
	if _, ok := c.Find("builtin__read_file", ""); ok {
		t.Error("Find matched an exposed name")
	}
}

func TestCatalogEmpty(t *testing.T) {
	c := tool.NewCatalog(nil, nil)
	if c.Len() != 0 || len(c.Tools()) != 0 || len(c.Servers()) != 0 || len(c.Collisions()) != 0 {
		t.Error("empty catalog is not empty")
	}
	if _, ok := c.Lookup("x"); ok {
		t.Error("Lookup in empty catalog succeeded")
	}
	if s := c.Suggest("read_file"); s != "" {
		t.Errorf("Suggest in empty catalog = %q", s)
	}
	_, err := c.Resolve("x")
	if tool.KindOf(err) != tool.KindToolNotRegistered || tool.AsError(err).Suggestion != "" {
		t.Errorf("Resolve in empty catalog: %v", err)
	}
}

func TestCatalogDuplicateLaterWins(t *testing.T) {
	c := tool.NewCatalog([]tool.Tool{
		{Server: "s", Name: "t", Description: "first"},
		{Server: "s", Name: "other"},
		{Server: "s", Name: "t", Description: "second"},
		{Server: "s", Name: "t", Description: "third"},
	}, []tool.ServerHealth{{Name: "s"}})
	if c.Len() != 2 {
		t.Fatalf("Len = %d, want 2", c.Len())
	}
	tl, ok := c.Find("s", "t")
	if !ok || tl.Description != "third" {
		t.Errorf("Find = %+v, want the last duplicate", tl)
	}
	if tl, _ := c.Lookup("s__t"); tl.Description != "third" {
		t.Errorf("Lookup = %+v, want the last duplicate", tl)
	}
	if len(c.Collisions()) != 0 {
		t.Errorf("a duplicate is not a collision: %+v", c.Collisions())
	}
	if s, _ := c.Server("s"); s.Tools != 2 {
		t.Errorf("duplicates counted twice: Tools = %d", s.Tools)
	}
}

func TestCatalogCollision(t *testing.T) {
	for _, order := range [][]tool.Tool{
		{{Server: "a.b", Name: "x"}, {Server: "a_b", Name: "x"}},
		{{Server: "a_b", Name: "x"}, {Server: "a.b", Name: "x"}},
	} {
		c := tool.NewCatalog(order, nil)
		cols := c.Collisions()
		if len(cols) != 1 {
			t.Fatalf("collisions = %+v, want exactly one", cols)
		}
		// "a.b" sorts before "a_b" ('.' < '_'), so it keeps the plain name.
		winner, _ := c.Find("a.b", "x")
		loser, _ := c.Find("a_b", "x")
		if winner.Exposed != "a_b__x" {
			t.Errorf("winner got %q, want a_b__x", winner.Exposed)
		}
		if loser.Exposed == "a_b__x" || !strings.HasPrefix(loser.Exposed, "a_b__x_") ||
			len(loser.Exposed) != len("a_b__x_")+8 || !validName.MatchString(loser.Exposed) {
			t.Errorf("loser got %q, want a_b__x_ + 8 hex digits", loser.Exposed)
		}
		want := tool.Collision{Name: "a_b__x", Server: "a_b", Tool: "x", Holder: "a.b/x", Assigned: loser.Exposed}
		if cols[0] != want {
			t.Errorf("collision = %+v, want %+v", cols[0], want)
		}
		if got, _ := c.Lookup("a_b__x"); identity(got) != "a.b/x" {
			t.Errorf("Lookup(a_b__x) = %s", identity(got))
		}
		if got, _ := c.Lookup(loser.Exposed); identity(got) != "a_b/x" {
			t.Errorf("Lookup(%s) = %s", loser.Exposed, identity(got))
		}
	}
}

func TestCatalogHashedNameAvoidsAnotherToolsPlainName(t *testing.T) {
	base := tool.NewCatalog([]tool.Tool{{Server: "a.b", Name: "x"}, {Server: "a_b", Name: "x"}}, nil)
	loser, _ := base.Find("a_b", "x")
	hashed := loser.Exposed // "a_b__x_<hash>"
	// A third tool whose plain name is exactly that hashed name.
	squatter := tool.Tool{Server: "a_b", Name: strings.TrimPrefix(hashed, "a_b__")}
	if tool.ExposedName(squatter.Server, squatter.Name) != hashed {
		t.Fatalf("setup: squatter's name is %q, want %q", tool.ExposedName(squatter.Server, squatter.Name), hashed)
	}
	tools := []tool.Tool{{Server: "a.b", Name: "x"}, {Server: "a_b", Name: "x"}, squatter}
	c := tool.NewCatalog(tools, nil)
	sq, _ := c.Find(squatter.Server, squatter.Name)
	if sq.Exposed != hashed {
		t.Errorf("the squatter lost its plain name: %q", sq.Exposed)
	}
	l, _ := c.Find("a_b", "x")
	if l.Exposed == hashed || l.Exposed == "a_b__x" || !validName.MatchString(l.Exposed) {
		t.Errorf("loser got %q", l.Exposed)
	}
	assertDistinctNames(t, c)
	if len(c.Collisions()) != 1 || c.Collisions()[0].Assigned != l.Exposed {
		t.Errorf("collisions = %+v", c.Collisions())
	}
}

func assertDistinctNames(t *testing.T, c *tool.Catalog) {
	t.Helper()
	seen := map[string]string{}
	for _, tl := range c.Tools() {
		if !validName.MatchString(tl.Exposed) {
			t.Errorf("%s has invalid name %q", identity(tl), tl.Exposed)
		}
		if prev, ok := seen[tl.Exposed]; ok {
			t.Errorf("%s and %s share name %q", prev, identity(tl), tl.Exposed)
		}
		seen[tl.Exposed] = identity(tl)
		if got, ok := c.Lookup(tl.Exposed); !ok || identity(got) != identity(tl) {
			t.Errorf("Lookup(%q) = %s, want %s", tl.Exposed, identity(got), identity(tl))
		}
	}
}

func TestCatalogManyCollidingIdentities(t *testing.T) {
	servers := []string{"a_b", "a.b", "a b", "a/b", "a:b", "a@b", "a#b", "a$b", "aéb", "a\tb", "a日b", "a+b"}
	var tools []tool.Tool
	for _, s := range servers {
		tools = append(tools, tool.Tool{Server: s, Name: "x"}, tool.Tool{Server: s, Name: "x.y"}, tool.Tool{Server: s, Name: "x y"})
	}
	c := tool.NewCatalog(tools, nil)
	if c.Len() != len(tools) {
		t.Fatalf("Len = %d, want %d", c.Len(), len(tools))
	}
	assertDistinctNames(t, c)
	// Two preferred names (a_b__x and a_b__x_y), each held by one tool.
	if got, want := len(c.Collisions()), len(tools)-2; got != want {
		t.Errorf("%d collisions, want %d", got, want)
	}
	for _, col := range c.Collisions() {
		if col.Assigned == col.Name {
			t.Errorf("collision kept its preferred name: %+v", col)
		}
		if tl, _ := c.Find(col.Server, col.Tool); tl.Exposed != col.Assigned {
			t.Errorf("collision %+v disagrees with the tool's name %q", col, tl.Exposed)
		}
		if h, _ := c.Lookup(col.Name); identity(h) != col.Holder {
			t.Errorf("collision %+v: the holder has %s", col, identity(h))
		}
	}
}

func TestCatalogLongCollidingNames(t *testing.T) {
	long := strings.Repeat("x", 70)
	tools := []tool.Tool{
		{Server: "a.b", Name: long}, {Server: "a_b", Name: long},
		{Server: "s", Name: long + "1"}, {Server: "s", Name: long + "2"},
	}
	c := tool.NewCatalog(tools, nil)
	assertDistinctNames(t, c)
	for _, tl := range c.Tools() {
		if len(tl.Exposed) > tool.MaxNameLen {
			t.Errorf("%s: %q is too long", identity(tl), tl.Exposed)
		}
	}
	// Shortened names hash the raw identity, so neither the two long names that
	// sanitise alike nor the two that share a long prefix collide.
	if len(c.Collisions()) != 0 {
		t.Errorf("collisions = %+v", c.Collisions())
	}
}

func TestCatalogDeterministicRegardlessOfOrder(t *testing.T) {
	long := strings.Repeat("long_name_", 8)
	tools := []tool.Tool{
		{Server: "a.b", Name: "x"}, {Server: "a_b", Name: "x"}, {Server: "a b", Name: "x"},
		{Server: "a_b", Name: "x.y"}, {Server: "a_b", Name: "x_y"},
		{Server: "srv", Name: long + "1"}, {Server: "srv", Name: long + "2"},
		{Server: "s.v", Name: long}, {Server: "s_v", Name: long},
		{Server: "builtin", Name: "read_file"}, {Server: "fs", Name: "read_file"},
	}
	names := func(c *tool.Catalog) map[string]string {
		m := map[string]string{}
		for _, tl := range c.Tools() {
			m[identity(tl)] = tl.Exposed
		}
		return m
	}
	ref := tool.NewCatalog(tools, nil)
	refNames := names(ref)
	assertDistinctNames(t, ref)
	if len(ref.Collisions()) == 0 {
		t.Fatal("setup: expected collisions")
	}
	rng := rand.New(rand.NewPCG(42, 7))
	for i := range 50 {
		shuffled := slices.Clone(tools)
		rng.Shuffle(len(shuffled), func(a, b int) { shuffled[a], shuffled[b] = shuffled[b], shuffled[a] })
		c := tool.NewCatalog(shuffled, nil)
		if got := names(c); !reflect.DeepEqual(got, refNames) {
			t.Fatalf("shuffle %d: names differ\n got %v\nwant %v", i, got, refNames)
		}
		if !reflect.DeepEqual(c.Collisions(), ref.Collisions()) {
			t.Fatalf("shuffle %d: collisions differ\n got %+v\nwant %+v", i, c.Collisions(), ref.Collisions())
		}
		if !reflect.DeepEqual(c.Tools(), ref.Tools()) {
			t.Fatalf("shuffle %d: tool order differs", i)
		}
	}
}

func TestCatalogServers(t *testing.T) {
	c := tool.NewCatalog(append(sampleTools(), tool.Tool{Server: "unlisted", Name: "t"}), sampleServers())
	got := map[string]int{}
	var order []string
	for _, s := range c.Servers() {
		got[s.Name] = s.Tools
		order = append(order, s.Name)
	}
	want := map[string]int{"builtin": 3, "fs": 2, "git": 1, "empty": 0}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("tool counts = %v, want %v", got, want)
	}
	if !slices.Equal(order, []string{"builtin", "fs", "git", "empty"}) {
		t.Errorf("server order changed: %v", order)
	}
	s, ok := c.Server("fs")
	if !ok || s.State != tool.StateDegraded || s.Error != "slow" || s.Tools != 2 {
		t.Errorf("Server(fs) = %+v, %v", s, ok)
	}
	if s, ok := c.Server("empty"); !ok || s.Tools != 0 || s.State != tool.StateFailed {
		t.Errorf("Server(empty) = %+v, %v", s, ok)
	}
	if s, ok := c.Server("unlisted"); ok || s != (tool.ServerHealth{}) {
		t.Errorf("Server(unlisted) = %+v, %v", s, ok)
	}
	// The tool of an unlisted server is still in the catalog.
	if _, ok := c.Find("unlisted", "t"); !ok {
		t.Error("tool of an unlisted server was dropped")
	}
}

func newSuggestCatalog() *tool.Catalog {
	return tool.NewCatalog([]tool.Tool{
		{Server: "builtin", Name: "read_file"},
		{Server: "builtin", Name: "list_dir"},
		{Server: "builtin", Name: "grep"},
		{Server: "git", Name: "git_status"},
		{Server: "git", Name: "git_log"},
		{Server: "web", Name: "fetch-url"},
	}, nil)
}

func TestCatalogResolve(t *testing.T) {
	c := newSuggestCatalog()
	tl, err := c.Resolve("builtin__read_file")
	if err != nil || identity(tl) != "builtin/read_file" {
		t.Fatalf("Resolve(existing) = %+v, %v", tl, err)
	}

	tl, err = c.Resolve("builtin__raed_file")
	if err == nil {
		t.Fatal("Resolve(typo) succeeded")
	}
	if !reflect.DeepEqual(tl, tool.Tool{}) {
		t.Errorf("Resolve(typo) returned a tool: %+v", tl)
	}
	var te *tool.Error
	if !errors.As(err, &te) {
		t.Fatalf("error is %T, want *tool.Error", err)
	}
	if te.Kind != tool.KindToolNotRegistered || te.Suggestion != "builtin__read_file" || te.Tool != "builtin__raed_file" {
		t.Errorf("error = %+v", te)
	}
	if !errors.Is(err, &tool.Error{Kind: tool.KindToolNotRegistered}) {
		t.Error("errors.Is by kind failed")
	}
	if !strings.Contains(err.Error(), "builtin__raed_file") || !strings.Contains(err.Error(), "did you mean builtin__read_file?") {
		t.Errorf("Error() = %q", err.Error())
	}

	_, err = c.Resolve("zzzzqqq")
	if tool.KindOf(err) != tool.KindToolNotRegistered || tool.AsError(err).Suggestion != "" {
		t.Errorf("Resolve(nonsense) = %v", err)
	}
}

func TestCatalogSuggest(t *testing.T) {
	c := newSuggestCatalog()
	cases := []struct{ in, want string }{
		{"builtin__read_file", "builtin__read_file"}, // exact
		{"read_file", "builtin__read_file"},          // bare tool name
		{"builtin__raed_file", "builtin__read_file"}, // transposition
		{"builtin__read_fil", "builtin__read_file"},  // deletion
		{"raed_file", "builtin__read_file"},          // typo in a bare name
		{"BUILTIN__READ-FILE", "builtin__read_file"}, // case and '-'
		{"git_status", "git__git_status"},
		{"git__git_stats", "git__git_status"},
		{"fetch_url", "web__fetch-url"}, // '_' matches '-'
		{"list_dir", "builtin__list_dir"},
		{"zzzzqqq", ""},
		{"completely_unrelated_name", ""},
	}
	for _, cs := range cases {
		if got := c.Suggest(cs.in); got != cs.want {
			t.Errorf("Suggest(%q) = %q, want %q", cs.in, got, cs.want)
		}
	}
}

func TestCatalogSuggestTool(t *testing.T) {
	c := tool.NewCatalog([]tool.Tool{
		{Server: "builtin", Name: "read_file"},
		{Server: "fs", Name: "read_files"},
		{Server: "fs", Name: "write_file"},
		{Server: "git", Name: "status"},
	}, nil)
	cases := []struct{ server, in, want string }{
		{"fs", "read_file", "read_files"}, // builtin's exact match is not considered
		{"builtin", "read_files", "read_file"},
		{"fs", "write_fiel", "write_file"},
		{"fs", "WRITE-FILE", "write_file"},
		{"git", "read_file", ""}, // nothing close on git
		{"git", "stats", "status"},
		{"nope", "read_file", ""}, // unknown server
		{"fs", "zzzzqqq", ""},
	}
	for _, cs := range cases {
		if got := c.SuggestTool(cs.server, cs.in); got != cs.want {
			t.Errorf("SuggestTool(%q, %q) = %q, want %q", cs.server, cs.in, got, cs.want)
		}
	}
}

func TestClosest(t *testing.T) {
	cands := []string{"write_file", "read_file", "list_dir"}
	cases := []struct {
		in, want string
		cands    []string
	}{
		{"read_file", "read_file", cands},
		{"Read-File", "read_file", cands},
		{"READ_FILE", "read_file", cands},
		{"read-fiel", "read_file", cands},
		{"list-dir", "list_dir", cands},
		{"read", "read_file", cands}, // containment
		{"zzzzqqq", "", cands},
		{"anything", "", nil},
		{"anything", "", []string{}},
		{"Foo-Bar", "foo_bar", []string{"foo_bar"}},
		{"foo_bar", "Foo-Bar", []string{"Foo-Bar"}}, // returns the candidate as given
		// '-' and '_' are the same character: 3 of them would be too many edits.
		{"a-b-c-d", "a_b_c_d", []string{"a_b_c_d"}},
		{"A_B_C_D", "a-b-c-d", []string{"a-b-c-d"}},
		// ... and an exact match up to '-'/'_' beats a one-letter typo listed first.
		{"read-file", "read_file", []string{"read_fila", "read_file"}},
		{"READ_FILE", "read_file", []string{"reaD_fila", "read_file"}},
	}
	for _, cs := range cases {
		if got := tool.Closest(cs.in, cs.cands); got != cs.want {
			t.Errorf("Closest(%q, %v) = %q, want %q", cs.in, cs.cands, got, cs.want)
		}
	}
}

func TestClosestPrefersSmallerDistanceAndFirstOnTies(t *testing.T) {
	if got := tool.Closest("abcdef", []string{"abcxyz", "abcdeg"}); got != "abcdeg" {
		t.Errorf("Closest picked %q, want the nearer abcdeg", got)
	}
	if got := tool.Closest("abcdef", []string{"abcdeh", "abcdeg"}); got != "abcdeh" {
		t.Errorf("Closest picked %q, want the first of equals", got)
	}
	// The threshold grows with the name: 2 edits for short names, len/3 for long ones.
	if got := tool.Closest("abc", []string{"xyc"}); got != "xyc" {
		t.Errorf("2 edits on a short name should be accepted, got %q", got)
	}
	if got := tool.Closest("abcd", []string{"xyzd"}); got != "" {
		t.Errorf("3 edits on a 4-char name should be rejected, got %q", got)
	}
	long := "abcdefghijklmnopqr" // 18 chars: up to 6 edits
	if got := tool.Closest(long, []string{"abcdefghijklXXXXXX"}); got == "" {
		t.Error("6 edits on an 18-char name should be accepted")
	}
	if got := tool.Closest(long, []string{"abcdefghijkXXXXXXX"}); got != "" {
		t.Errorf("7 edits on an 18-char name should be rejected, got %q", got)
	}
}

func TestCatalogLargeLookup(t *testing.T) {
	var tools []tool.Tool
	for s := range 20 {
		for n := range 200 {
			tools = append(tools, tool.Tool{Server: fmt.Sprintf("srv%02d", s), Name: fmt.Sprintf("tool_%03d", n)})
		}
	}
	c := tool.NewCatalog(tools, nil)
	if c.Len() != len(tools) {
		t.Fatalf("Len = %d", c.Len())
	}
	assertDistinctNames(t, c)
	if !slices.IsSortedFunc(c.Tools(), func(a, b tool.Tool) int {
		if a.Server != b.Server {
			return strings.Compare(a.Server, b.Server)
		}
		return strings.Compare(a.Name, b.Name)
	}) {
		t.Error("tools are not sorted by (server, name)")
	}
	if tl, ok := c.Find("srv13", "tool_177"); !ok || tl.Exposed != "srv13__tool_177" {
		t.Errorf("Find = %+v, %v", tl, ok)
	}
}
