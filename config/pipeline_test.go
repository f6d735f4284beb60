package config_test

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/toolmux/toolmux/config"
)

// pipelineExample is the example of docs/config.md, every key set.
const pipelineExample = `pipeline:
  order: [record, instructions, truncate, rollback, fallback, repair, validate, url_policy, dedupe, pii]
  repair:
    schema: true
    aliases:
      scrape_and_extract_info: {description: info_to_extract, introduction: info_to_extract}
      "*/run_python": {code: code_block}
  validate:
    max_argument_bytes: 1MiB
  url_policy:
    arguments: [url, link]
    default: allow
    rules:
      - action: deny
        host: huggingface.co
        path: /datasets/**
        tools: ["scrape*", "*/fetch"]
        message: "Hugging Face datasets may not be scraped."
  dedupe:
    policy: warn
    keys: [q, query]
    tools:
      google_search: {keys: [q], policy: reject}
  fallbacks:
    - tools: [scrape, scrape_website]
      on: [timeout, server_unavailable, tool_error]
      target: builtin/web_fetch
      arguments: {url: url}
  truncate:
    max_chars: 50000
    tools: {"*/scrape*": 20000}
    low_context:
      enabled: false
      max_chars: 10000
      tools: {"*/scrape*": 5000}
  rollback:
    rules:
      - {prefix: "Unknown tool:"}
      - {json_empty: organic, tools: [google_search], reason: "the search found nothing; rewrite the query"}
      - {kinds: [tool_not_registered, duplicate_query]}
  instructions:
    tools:
      "*/scrape*": "Scraped pages can be long; ask for what you need with info_to_extract."
    rules:
      - {tools: [google_search], match: "(?i)no results", text: "Try fewer, more general keywords."}
  redact:
    keys: [x-api-key]
    patterns: ["sk-[A-Za-z0-9]{20,}"]
  pii:
    regions: [US, GB]
    max_findings: 20
    rules:
      - {kinds: [card, iban, secret], action: refuse}
      - {kinds: [email, phone], on: [result], action: mask, tools: ["crm/*"]}
      - {kinds: [email, phone], action: note}
`

var pipelineExampleWant = config.Pipeline{
	Order: []string{"record", "instructions", "truncate", "rollback", "fallback", "repair", "validate", "url_policy", "dedupe", "pii"},
	Repair: config.Repair{
		Aliases: []config.Aliases{
			{Tools: "scrape_and_extract_info", Map: map[string]string{"description": "info_to_extract", "introduction": "info_to_extract"}},
			{Tools: "*/run_python", Map: map[string]string{"code": "code_block"}},
		},
	},
	Validate: config.Validate{MaxArgumentBytes: 1 << 20},
	URLPolicy: config.URLPolicy{
		Arguments: []string{"url", "link"},
		Default:   "allow",
		Rules: []config.URLRule{{
			Action: "deny", Host: "huggingface.co", Path: "/datasets/**",
			Tools: []string{"scrape*", "*/fetch"}, Message: "Hugging Face datasets may not be scraped.",
		}},
	},
	Dedupe: config.Dedupe{
		Policy: "warn",
		Keys:   []string{"q", "query"},
		Tools:  []config.DedupeTool{{Tools: "google_search", Keys: []string{"q"}, Policy: "reject"}},
	},
	Fallbacks: []config.Fallback{{
		Tools:     []string{"scrape", "scrape_website"},
		On:        []string{"timeout", "server_unavailable", "tool_error"},
		Target:    "builtin/web_fetch",
		Arguments: map[string]string{"url": "url"},
	}},
	Truncate: config.Truncate{
		MaxChars: 50000,
		Tools:    []config.ToolLimit{{Tools: "*/scrape*", MaxChars: 20000}},
		LowContext: config.LowContext{
			MaxChars: 10000,
			Tools:    []config.ToolLimit{{Tools: "*/scrape*", MaxChars: 5000}},
		},
	},
	Rollback: config.Rollback{Rules: []config.RollbackRule{
		{Prefix: "Unknown tool:"},
		{JSONEmpty: "organic", Tools: []string{"google_search"}, Reason: "the search found nothing; rewrite the query"},
		{Kinds: []string{"tool_not_registered", "duplicate_query"}},
	}},
	Instructions: config.Instructions{
		Tools: []config.ToolText{{Tools: "*/scrape*", Text: "Scraped pages can be long; ask for what you need with info_to_extract."}},
		Rules: []config.InstructionRule{{Tools: []string{"google_search"}, Match: "(?i)no results", Text: "Try fewer, more general keywords."}},
	},
	Redact: config.Redact{Keys: []string{"x-api-key"}, Patterns: []string{"sk-[A-Za-z0-9]{20,}"}},
	PII: config.PII{
		Regions:     []string{"US", "GB"},
		MaxFindings: 20,
		Rules: []config.PIIRule{
			{Kinds: []string{"card", "iban", "secret"}, Action: "refuse"},
			{Kinds: []string{"email", "phone"}, On: []string{"result"}, Action: "mask", Tools: []string{"crm/*"}},
			{Kinds: []string{"email", "phone"}, Action: "note"},
		},
	},
}

// checkPipeline compares section by section, so a failure says where.
func checkPipeline(t *testing.T, got, want config.Pipeline) {
	t.Helper()
	gv, wv := reflect.ValueOf(got), reflect.ValueOf(want)
	for i := range gv.NumField() {
		if g, w := gv.Field(i).Interface(), wv.Field(i).Interface(); !reflect.DeepEqual(g, w) {
			t.Errorf("%s:\n got %#v\nwant %#v", gv.Type().Field(i).Name, g, w)
		}
	}
}

func TestPipelineExample(t *testing.T) {
	cfg, _ := mustLoad(t, "toolmux.yaml", pipelineExample)
	checkPipeline(t, cfg.Pipeline, pipelineExampleWant)
	// docs/config.md says the order shown is the default.
	if !slices.Equal(pipelineExampleWant.Order, config.DefaultPipelineOrder) {
		t.Errorf("the example's order %v is not the default %v", pipelineExampleWant.Order, config.DefaultPipelineOrder)
	}
	// The rest of the configuration is untouched by the section.
	rest := *cfg
	rest.Pipeline = config.Pipeline{}
	want := config.Default()
	want.Path, want.Workspace = rest.Path, rest.Workspace
	checkConfig(t, &rest, want)
}

// The example in docs/config.md is the one tested here.
func TestPipelineDocExample(t *testing.T) {
	data, err := os.ReadFile("../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	var example string
	for _, m := range regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(string(data), -1) {
		if strings.HasPrefix(m[1], "pipeline:") {
			example = m[1]
		}
	}
	if example == "" {
		t.Fatal("docs/config.md has no yaml block starting with pipeline:")
	}
	cfg, err := config.ParseWith("config.md", []byte(example), config.Options{LookupEnv: envOf(testEnv), Dir: "/work"})
	if err != nil {
		t.Fatal(err)
	}
	checkPipeline(t, cfg.Pipeline, pipelineExampleWant)
}

func TestPipelineDefaults(t *testing.T) {
	for _, content := range []string{"", "timeout: 1m\n", "pipeline:\n", "pipeline: {}\n",
		"pipeline:\n  order:\n  rollback:\n  dedupe: {keys: ~}\n  truncate: {low_context: {}}\n"} {
		cfg, _ := mustLoad(t, "toolmux.yaml", content)
		if !reflect.DeepEqual(cfg.Pipeline, config.Pipeline{}) {
			t.Errorf("%q: got %#v, want the zero Pipeline", content, cfg.Pipeline)
		}
		if cfg.Pipeline.Order != nil || cfg.Pipeline.Rollback.Rules != nil || cfg.Pipeline.Dedupe.Keys != nil {
			t.Errorf("%q: defaults are not nil", content)
		}
	}
	if !reflect.DeepEqual(config.Default().Pipeline, config.Pipeline{}) {
		t.Errorf("Default().Pipeline = %#v", config.Default().Pipeline)
	}
}

// An explicitly empty list means "none", not "the defaults".
func TestPipelineEmptyLists(t *testing.T) {
	cfg, _ := mustLoad(t, "toolmux.yaml", `pipeline:
  order: []
  rollback: {rules: []}
  dedupe:
    keys: []
    tools: {search: {keys: []}, other: {policy: allow}}
  fallbacks:
    - {tools: [status], on: [timeout], target: backup/status, arguments: {}}
`)
	pl := cfg.Pipeline
	if pl.Order == nil || len(pl.Order) != 0 {
		t.Errorf("order: %#v", pl.Order)
	}
	if pl.Rollback.Rules == nil || len(pl.Rollback.Rules) != 0 {
		t.Errorf("rollback rules: %#v", pl.Rollback.Rules)
	}
	if pl.Dedupe.Keys == nil || len(pl.Dedupe.Keys) != 0 {
		t.Errorf("dedupe keys: %#v", pl.Dedupe.Keys)
	}
	if want := []config.DedupeTool{{Tools: "search", Keys: []string{}}, {Tools: "other", Policy: "allow"}}; !reflect.DeepEqual(pl.Dedupe.Tools, want) {
		t.Errorf("dedupe tools: %#v", pl.Dedupe.Tools)
	}
	if a := pl.Fallbacks[0].Arguments; a == nil || len(a) != 0 {
		t.Errorf("fallback arguments: %#v", a)
	}
}

func TestPipelineValues(t *testing.T) {
	cfg, _ := mustLoad(t, "toolmux.yaml", `pipeline:
  order: [dedupe, record]
  repair: {schema: false}
  url_policy:
    default: deny
    rules:
      - {action: allow, host: "*.Example.COM", message: "key ${EVERYTHING_KEY}"}
      - {action: deny, tools: ["${SERVER:-web}/*"], path: "**/private/**"}
  truncate:
    low_context:
      tools: &limits
        "*/scrape*": 100
    tools:
      <<: *limits
      "*": 7
  rollback:
    rules:
      - {is_error: true, tools: [x]}
      - {json_empty: data.items}
  instructions:
    tools: {a: "$${literal} ${REMOTE_TOKEN}"}
    rules:
      - {kinds: [timeout], text: t}
      - {match: "^done$", kinds: [tool_error, cancelled], text: "u"}
  redact: {keys: [Authorization-2], patterns: ["tok_[0-9]+"]}
servers:
  web: {command: w}
mcpServers:
  other: {command: o}
`)
	want := config.Pipeline{
		Order:  []string{"dedupe", "record"},
		Repair: config.Repair{NoSchema: true},
		URLPolicy: config.URLPolicy{
			Default: "deny",
			Rules: []config.URLRule{
				// Hosts are matched lower-cased, so the glob is too.
				{Action: "allow", Host: "*.example.com", Message: "key secret"},
				{Action: "deny", Tools: []string{"web/*"}, Path: "**/private/**"},
			},
		},
		Truncate: config.Truncate{
			// Keys written in a mapping come first, then merged ones.
			Tools:      []config.ToolLimit{{Tools: "*", MaxChars: 7}, {Tools: "*/scrape*", MaxChars: 100}},
			LowContext: config.LowContext{Tools: []config.ToolLimit{{Tools: "*/scrape*", MaxChars: 100}}},
		},
		Rollback: config.Rollback{Rules: []config.RollbackRule{
			{IsError: true, Tools: []string{"x"}},
			{JSONEmpty: "data.items"},
		}},
		Instructions: config.Instructions{
			Tools: []config.ToolText{{Tools: "a", Text: "${literal} tok"}},
			Rules: []config.InstructionRule{
				{Kinds: []string{"timeout"}, Text: "t"},
				{Match: "^done$", Kinds: []string{"tool_error", "cancelled"}, Text: "u"},
			},
		},
		Redact: config.Redact{Keys: []string{"Authorization-2"}, Patterns: []string{"tok_[0-9]+"}},
	}
	checkPipeline(t, cfg.Pipeline, want)
	if len(cfg.Servers) != 2 {
		t.Errorf("servers: %+v", cfg.Servers)
	}
}

// A toolmux.yaml may use mcpServers and still have a pipeline; so may a JSON
// file, which is then a toolmux configuration and strict.
func TestPipelineWithMCPServers(t *testing.T) {
	for _, tc := range []struct{ file, content string }{
		{"toolmux.yaml", "mcpServers:\n  a: {command: a}\npipeline:\n  dedupe: {policy: reject}\n"},
		{"toolmux.json", `{"mcpServers": {"a": {"command": "a"}}, "pipeline": {"dedupe": {"policy": "reject"}}}`},
	} {
		cfg, dir := mustLoad(t, tc.file, tc.content)
		if cfg.Pipeline.Dedupe.Policy != "reject" || len(cfg.Servers) != 1 {
			t.Errorf("%s: got %+v", tc.file, cfg)
		}
		if cfg.Workspace != dir {
			t.Errorf("%s: workspace %q, want the file's directory", tc.file, cfg.Workspace)
		}
	}
}

func TestPipelineSizes(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  int64
	}{
		{"1048576", 1 << 20},
		{"0x400", 1024},
		{`"1048576"`, 1 << 20},
		{"1MiB", 1 << 20},
		{"512KiB", 512 << 10},
		{`"512 KiB"`, 512 << 10},
		{"2MB", 2_000_000},
		{"100kb", 100_000},
		{"3mib", 3 << 20},
		{"1GiB", 1 << 30},
		{"1GB", 1_000_000_000},
		{"1B", 1},
		{"1", 1},
	} {
		cfg, _, err := load(t, "toolmux.yaml", "pipeline: {validate: {max_argument_bytes: "+tc.value+"}}\n")
		if err != nil {
			t.Errorf("%s: %v", tc.value, err)
			continue
		}
		if got := cfg.Pipeline.Validate.MaxArgumentBytes; got != tc.want {
			t.Errorf("%s: got %d, want %d", tc.value, got, tc.want)
		}
	}
}

func TestPipelineErrors(t *testing.T) {
	for _, tc := range []struct {
		name, content string
		want          []wantErr
	}{
		{
			name:    "unknown key with suggestion",
			content: "pipeline:\n  fallback: []\n  url-policy: {}\n  frobnicate: 1\n",
			want: []wantErr{
				{2, 3, "pipeline.fallback", "unknown key (expected one of: order, repair, validate, url_policy, dedupe, fallbacks, truncate, rollback, instructions, redact, pii); did you mean fallbacks?"},
				{3, 3, "pipeline.url-policy", "did you mean url_policy?"},
				{4, 3, "pipeline.frobnicate", "unknown key (expected one of: order, "},
			},
		},
		{
			name:    "unknown top-level key",
			content: "pipelines: {}\n",
			want:    []wantErr{{1, 1, "pipelines", "did you mean pipeline?"}},
		},
		{
			name: "unknown nested keys",
			content: `pipeline:
  repair: {schemas: true}
  validate: {max_arg_bytes: 1}
  url_policy: {rules: [{action: deny, hosts: x}]}
  dedupe: {tools: {x: {key: [a]}}}
  fallbacks: [{tools: [a], on: [timeout], target: b/c, args: {}}]
  truncate: {low_context: {max_char: 5}}
  rollback: {rule: []}
  instructions: {rules: [{kinds: [timeout], txt: x}]}
  redact: {pattern: []}
`,
			want: []wantErr{
				{2, 12, "pipeline.repair.schemas", "unknown key (expected one of: schema, aliases); did you mean schema?"},
				{3, 14, "pipeline.validate.max_arg_bytes", "unknown key (expected one of: max_argument_bytes)"},
				{4, 39, "pipeline.url_policy.rules[0].hosts", "unknown key (expected one of: action, host, path, tools, message); did you mean host?"},
				{5, 24, "pipeline.dedupe.tools.x.key", "unknown key (expected one of: keys, policy); did you mean keys?"},
				{6, 56, "pipeline.fallbacks[0].args", "unknown key (expected one of: tools, on, target, arguments)"},
				{7, 28, "pipeline.truncate.low_context.max_char", "did you mean max_chars?"},
				{8, 14, "pipeline.rollback.rule", "unknown key (expected one of: rules); did you mean rules?"},
				{9, 26, "pipeline.instructions.rules[0]", "missing text"},
				{9, 45, "pipeline.instructions.rules[0].txt", "did you mean text?"},
				{10, 12, "pipeline.redact.pattern", "did you mean patterns?"},
			},
		},
		{
			name:    "order",
			content: "pipeline:\n  order: [record, fallbacks, dedupe, url_policy, dedupe, 3, [x]]\n",
			want: []wantErr{
				{2, 19, "pipeline.order[1]", `unknown middleware "fallbacks" (expected one of: record, instructions, truncate, rollback, fallback, repair, validate, url_policy, dedupe, pii); did you mean fallback?`},
				{2, 50, "pipeline.order[4]", "dedupe is listed twice (first as pipeline.order[2])"},
				{2, 58, "pipeline.order[5]", `unknown middleware "3"`},
				{2, 61, "pipeline.order[6]", "expected a string, got a list"},
			},
		},
		{
			name: "pii",
			content: `pipeline:
  pii:
    regions: [us, GB]
    max_findings: 0
    rules:
      - {kinds: [emial], on: [results], action: mask}
      - {kinds: [], action: drop}
      - {kinds: [card], tools: ["crm/*"]}
      - {action: note, scope: all}
`,
			want: []wantErr{
				{3, 15, "pipeline.pii.regions[0]", `"us" is not a region code (two capital letters, ISO 3166: US, GB, DE)`},
				{4, 19, "pipeline.pii.max_findings", "must be between 1 and 10000"},
				{6, 18, "pipeline.pii.rules[0].kinds[0]", `unknown kind "emial" (expected email, phone, card, iban or secret); did you mean email?`},
				{6, 31, "pipeline.pii.rules[0].on[0]", `unknown direction "results" (expected arguments or result); did you mean result?`},
				{7, 17, "pipeline.pii.rules[1].kinds", "must not be empty"},
				{7, 29, "pipeline.pii.rules[1].action", `unknown action "drop" (expected mask, refuse or note)`},
				{8, 9, "pipeline.pii.rules[2]", "missing action (mask, refuse or note)"},
				{9, 24, "pipeline.pii.rules[3].scope", "unknown key (expected one of: kinds, on, action, tools)"},
			},
		},
		{
			name:    "order is not a list",
			content: "pipeline:\n  order: record\n",
			want:    []wantErr{{2, 10, "pipeline.order", `expected a list, got "record"`}},
		},
		{
			name: "policies and actions",
			content: `pipeline:
  dedupe:
    policy: block
    tools: {x: {policy: warnn}}
  url_policy:
    default: maybe
    rules:
      - {action: alow}
      - {host: x.com}
      - {action: [deny]}
`,
			want: []wantErr{
				{3, 13, "pipeline.dedupe.policy", `unknown policy "block" (expected allow, warn or reject)`},
				{4, 25, "pipeline.dedupe.tools.x.policy", `unknown policy "warnn" (expected allow, warn or reject); did you mean warn?`},
				{6, 14, "pipeline.url_policy.default", `unknown action "maybe" (expected allow or deny)`},
				{8, 18, "pipeline.url_policy.rules[0].action", `unknown action "alow" (expected allow or deny); did you mean allow?`},
				{9, 9, "pipeline.url_policy.rules[1]", "missing action (allow or deny)"},
				{10, 18, "pipeline.url_policy.rules[2].action", "expected a string, got a list"},
			},
		},
		{
			name: "rollback rules",
			content: `pipeline:
  rollback:
    rules:
      - {prefix: "Error:", kinds: [timeout], is_error: true}
      - {tools: [x], reason: nothing to match}
      - {is_error: false}
      - {prefix: ""}
      - {json_empty: "a..b"}
      - {json_empty: ".x"}
      - {kinds: []}
      - {kinds: [timout, Timeout, nonsense]}
      -
      - prefix
`,
			want: []wantErr{
				{4, 28, "pipeline.rollback.rules[0]", "has both prefix and kinds, but a rule has exactly one condition (prefix, is_error, json_empty or kinds)"},
				{4, 46, "pipeline.rollback.rules[0]", "has both prefix and is_error"},
				{5, 9, "pipeline.rollback.rules[1]", "needs a condition: one of prefix, is_error, json_empty or kinds"},
				{6, 20, "pipeline.rollback.rules[2].is_error", "must be true"},
				{7, 18, "pipeline.rollback.rules[3].prefix", "must not be empty"},
				{8, 22, "pipeline.rollback.rules[4].json_empty", `"a..b" is not a dotted path (expected keys joined by ".", such as "data.items")`},
				{9, 22, "pipeline.rollback.rules[5].json_empty", `".x" is not a dotted path`},
				{10, 17, "pipeline.rollback.rules[6].kinds", "must not be empty"},
				{11, 18, "pipeline.rollback.rules[7].kinds[0]", `unknown error kind "timout" (expected one of: tool_not_registered, server_not_found, `},
				{11, 26, "pipeline.rollback.rules[7].kinds[1]", "did you mean timeout?"},
				{11, 35, "pipeline.rollback.rules[7].kinds[2]", `unknown error kind "nonsense"`},
				{12, 8, "pipeline.rollback.rules[8]", "expected a mapping, got null"},
				{13, 9, "pipeline.rollback.rules[9]", `expected a mapping, got "prefix"`},
			},
		},
		{
			name:    "rollback rules is not a list",
			content: "pipeline:\n  rollback: {rules: {prefix: x}}\n",
			want:    []wantErr{{2, 21, "pipeline.rollback.rules", "expected a list, got a mapping"}},
		},
		{
			name: "fallbacks",
			content: `pipeline:
  fallbacks:
    - {}
    - tools: []
      on: []
      target: ""
    - tools: ["a/[", "/x"]
      on: [timeout, server_unavailabel]
      target: web_fetch
      arguments: {url: "", "": x, link: [a]}
    - {tools: [a], on: [timeout], target: "builtin/*"}
    - {tools: [a], on: [timeout], target: "a/b/c"}
    - {tools: [a], on: [timeout], target: "/fetch"}
    - {tools: a, on: timeout, target: [a/b]}
  truncate: {}
`,
			want: []wantErr{
				{3, 7, "pipeline.fallbacks[0]", "missing tools (the patterns of the tools it applies to)"},
				{3, 7, "pipeline.fallbacks[0]", "missing on (the error kinds that trigger it, such as timeout)"},
				{3, 7, "pipeline.fallbacks[0]", `missing target (the tool to call instead, as "server/tool")`},
				{4, 14, "pipeline.fallbacks[1].tools", "must not be empty"},
				{5, 11, "pipeline.fallbacks[1].on", "must not be empty"},
				{6, 15, "pipeline.fallbacks[1].target", "must not be empty"},
				{7, 15, "pipeline.fallbacks[2].tools[0]", `"a/[" is not a valid glob`},
				{7, 22, "pipeline.fallbacks[2].tools[1]", `"/x": expected "server/tool" or a bare tool name`},
				{8, 21, "pipeline.fallbacks[2].on[1]", "did you mean server_unavailable?"},
				{9, 15, "pipeline.fallbacks[2].target", `"web_fetch": expected one tool as "server/tool", such as "builtin/web_fetch"`},
				{10, 24, "pipeline.fallbacks[2].arguments.url", "must not be empty"},
				{10, 28, "pipeline.fallbacks[2].arguments.", "an argument name must not be empty"},
				{10, 41, "pipeline.fallbacks[2].arguments.link", "expected a string, got a list"},
				{11, 43, "pipeline.fallbacks[3].target", `"builtin/*": expected one tool as "server/tool", not a pattern`},
				{12, 43, "pipeline.fallbacks[4].target", `"a/b/c": expected one tool as "server/tool"`},
				{13, 43, "pipeline.fallbacks[5].target", `"/fetch": expected one tool as "server/tool"`},
				{14, 15, "pipeline.fallbacks[6].tools", `expected a list, got "a"`},
				{14, 22, "pipeline.fallbacks[6].on", `expected a list, got "timeout"`},
				{14, 39, "pipeline.fallbacks[6].target", "expected a string, got a list"},
			},
		},
		{
			name:    "fallbacks is not a list",
			content: "pipeline:\n  fallbacks: {tools: [a], on: [timeout], target: a/b}\n",
			want:    []wantErr{{2, 14, "pipeline.fallbacks", "expected a list, got a mapping"}},
		},
		{
			name: "regular expressions",
			content: `pipeline:
  instructions:
    rules:
      - {match: "(?i", text: x}
      - {match: "", text: x}
      - {match: "a(", kinds: [timeout], text: x}
  redact:
    patterns: ["[", "a*", "x|", "", "ok"]
`,
			want: []wantErr{
				{4, 17, "pipeline.instructions.rules[0].match", `"(?i" is not a valid regular expression: invalid or unsupported Perl syntax`},
				{5, 17, "pipeline.instructions.rules[1].match", "must not be empty"},
				{6, 17, "pipeline.instructions.rules[2].match", `"a(" is not a valid regular expression: missing closing )`},
				{8, 16, "pipeline.redact.patterns[0]", `"[" is not a valid regular expression: missing closing ]`},
				{8, 21, "pipeline.redact.patterns[1]", `"a*" matches the empty string`},
				{8, 27, "pipeline.redact.patterns[2]", `"x|" matches the empty string`},
				{8, 33, "pipeline.redact.patterns[3]", "must not be empty"},
			},
		},
		{
			name: "instruction rules",
			content: `pipeline:
  instructions:
    tools: {"*/scrape*": "", "a/[": x, b: [x]}
    rules:
      - {tools: [x], text: hello}
      - {match: x}
      - {kinds: [], text: x}
      - {kinds: [tool_eror], text: ""}
`,
			want: []wantErr{
				{3, 26, "pipeline.instructions.tools.*/scrape*", "must not be empty"},
				{3, 30, "pipeline.instructions.tools.a/[", `"a/[" is not a valid glob`},
				{3, 43, "pipeline.instructions.tools.b", "expected a string, got a list"},
				{5, 9, "pipeline.instructions.rules[0]", "needs match (a regular expression on the result text) or kinds (error kinds), or both"},
				{6, 9, "pipeline.instructions.rules[1]", "missing text (the instruction to attach)"},
				{7, 17, "pipeline.instructions.rules[2].kinds", "must not be empty"},
				{8, 18, "pipeline.instructions.rules[3].kinds[0]", "did you mean tool_error?"},
				{8, 36, "pipeline.instructions.rules[3].text", "must not be empty"},
			},
		},
		{
			name: "numbers",
			content: `pipeline:
  validate: {max_argument_bytes: 0}
  truncate:
    max_chars: 0
    tools: {a: -5, b: "100", c: 1.5, d: 2000000000}
    low_context: {max_chars: -1, enabled: 1, tools: {x: 0}}
`,
			want: []wantErr{
				{2, 34, "pipeline.validate.max_argument_bytes", "must be between 1 byte and 1GiB, got 0"},
				{4, 16, "pipeline.truncate.max_chars", "must be between 1 and 1000000000, got 0"},
				{5, 16, "pipeline.truncate.tools.a", "must be between 1 and 1000000000, got -5"},
				{5, 23, "pipeline.truncate.tools.b", `expected an integer, got "100"`},
				{5, 33, "pipeline.truncate.tools.c", "expected an integer, got 1.5"},
				{5, 41, "pipeline.truncate.tools.d", "must be between 1 and 1000000000, got 2000000000"},
				{6, 30, "pipeline.truncate.low_context.max_chars", "must be between 1 and 1000000000, got -1"},
				{6, 43, "pipeline.truncate.low_context.enabled", "expected true or false, got 1"},
				{6, 57, "pipeline.truncate.low_context.tools.x", "must be between 1 and 1000000000, got 0"},
			},
		},
		{
			name: "sizes",
			content: `pipeline:
  validate: {max_argument_bytes: 1.5MiB}
---
pipeline:
  validate: {max_argument_bytes: 2GiB}
`,
			want: []wantErr{{4, 1, "", "a second YAML document"}},
		},
		{
			name: "wrong types",
			content: `pipeline:
  order: {record: 1}
  repair: true
  validate: [1]
  url_policy: {arguments: url, rules: {action: deny}}
  dedupe: {keys: [q, [query], ""], tools: [x]}
  truncate: {tools: [x], low_context: true}
  rollback: []
  instructions: {tools: [a], rules: [x]}
  redact: {keys: "x-api-key", patterns: [1, {a: b}]}
`,
			want: []wantErr{
				{2, 10, "pipeline.order", "expected a list, got a mapping"},
				{3, 11, "pipeline.repair", "expected a mapping, got true"},
				{4, 13, "pipeline.validate", "expected a mapping, got a list"},
				{5, 27, "pipeline.url_policy.arguments", `expected a list, got "url"`},
				{5, 39, "pipeline.url_policy.rules", "expected a list, got a mapping"},
				{6, 22, "pipeline.dedupe.keys[1]", "expected a string, got a list"},
				{6, 31, "pipeline.dedupe.keys[2]", "must not be empty"},
				{6, 43, "pipeline.dedupe.tools", "expected a mapping, got a list"},
				{7, 21, "pipeline.truncate.tools", "expected a mapping, got a list"},
				{7, 39, "pipeline.truncate.low_context", "expected a mapping, got true"},
				{8, 13, "pipeline.rollback", "expected a mapping, got a list"},
				{9, 25, "pipeline.instructions.tools", "expected a mapping, got a list"},
				{9, 38, "pipeline.instructions.rules[0]", `expected a mapping, got "x"`},
				{10, 18, "pipeline.redact.keys", `expected a list, got "x-api-key"`},
				{10, 45, "pipeline.redact.patterns[1]", "expected a string, got a mapping"},
			},
		},
		{
			name:    "pipeline is not a mapping",
			content: "pipeline: [dedupe]\n",
			want:    []wantErr{{1, 11, "pipeline", "expected a mapping, got a list"}},
		},
		{
			name: "repair",
			content: `pipeline:
  repair:
    schema: "no"
    aliases:
      "a/[": {x: y}
      t: {z: z, w: "", v: [x]}
      u: [a]
`,
			want: []wantErr{
				{3, 13, "pipeline.repair.schema", `expected true or false, got "no"`},
				{5, 7, "pipeline.repair.aliases.a/[", `"a/[" is not a valid glob`},
				{6, 14, "pipeline.repair.aliases.t.z", `renames "z" to itself`},
				{6, 20, "pipeline.repair.aliases.t.w", "must not be empty"},
				{6, 27, "pipeline.repair.aliases.t.v", "expected a string, got a list"},
				{7, 10, "pipeline.repair.aliases.u", "expected a mapping, got a list"},
			},
		},
		{
			name: "URL rules",
			content: `pipeline:
  url_policy:
    arguments: [url, ""]
    rules:
      - {action: deny, host: "https://huggingface.co/datasets"}
      - {action: deny, host: "[a-", path: "/a/[b"}
      - {action: deny, path: "datasets/**", tools: ["x/"]}
      - {action: allow, message: "${NOPE}"}
`,
			want: []wantErr{
				{3, 22, "pipeline.url_policy.arguments[1]", "must not be empty"},
				{5, 30, "pipeline.url_policy.rules[0].host", `"https://huggingface.co/datasets": expected a host name or host glob such as "*.example.com", not a URL`},
				{6, 30, "pipeline.url_policy.rules[1].host", `"[a-" is not a valid glob: syntax error in pattern`},
				{6, 43, "pipeline.url_policy.rules[1].path", `"/a/[b" is not a valid glob`},
				{7, 30, "pipeline.url_policy.rules[2].path", `"datasets/**": URL paths start with "/", so a path glob starts with "/" or "*" (write "/datasets/**")`},
				{7, 53, "pipeline.url_policy.rules[2].tools[0]", `"x/": expected "server/tool" or a bare tool name`},
				{8, 34, "pipeline.url_policy.rules[3].message", "environment variable NOPE is not set"},
			},
		},
		{
			name: "patterns and duplicates",
			content: `pipeline:
  dedupe:
    tools:
      search: {policy: reject}
      search: {policy: allow}
      "": {}
  truncate:
    tools: {"/x": 1, "a/": 2}
  rollback:
    rules: [{is_error: true, tools: ["[", ""]}]
  redact: {keys: ["-_"]}
`,
			want: []wantErr{
				{5, 7, "pipeline.dedupe.tools.search", "duplicate key (first at line 4)"},
				{6, 7, "pipeline.dedupe.tools.", "empty pattern"},
				{8, 13, "pipeline.truncate.tools./x", `"/x": expected "server/tool" or a bare tool name`},
				{8, 22, "pipeline.truncate.tools.a/", `"a/": expected "server/tool" or a bare tool name`},
				{10, 38, "pipeline.rollback.rules[0].tools[0]", `"[" is not a valid glob`},
				{10, 43, "pipeline.rollback.rules[0].tools[1]", "empty pattern"},
				{11, 19, "pipeline.redact.keys[0]", `"-_" is not a key name`},
			},
		},
		{
			name: "variables",
			content: `pipeline:
  instructions:
    tools: {a: "${UNSET}"}
    rules: [{kinds: [timeout], text: "${9}"}]
  rollback: {rules: [{prefix: "${EMPTY:-x}", reason: "${X"}]}
`,
			want: []wantErr{
				{3, 16, "pipeline.instructions.tools.a", "environment variable UNSET is not set (use ${UNSET:-default} to give a default)"},
				{4, 38, "pipeline.instructions.rules[0].text", `invalid variable name "9"`},
				{5, 54, "pipeline.rollback.rules[0].reason", `unterminated "${"`},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) { checkErrors(t, "toolmux.yaml", tc.content, tc.want) })
	}
}

// checkErrors loads content and compares the errors with want.
func checkErrors(t *testing.T, file, content string, want []wantErr) {
	t.Helper()
	cfg, dir, err := load(t, file, content)
	if err == nil {
		t.Fatalf("no error; got %+v", cfg)
	}
	if cfg != nil {
		t.Errorf("got a config along with the error")
	}
	got := allErrors(t, err)
	path := filepath.Join(dir, file)
	// at shows the text an error points at, to make a failure readable.
	lines := strings.Split(content, "\n")
	at := func(line, col int) string {
		if line < 1 || line > len(lines) || col < 1 || col > len(lines[line-1])+1 {
			return ""
		}
		return shorten(lines[line-1][col-1:])
	}
	var report strings.Builder
	for _, e := range got {
		fmt.Fprintf(&report, "\n\t%d:%d %q %q at %q", e.Line, e.Column, e.Key, e.Msg, at(e.Line, e.Column))
	}
	if len(got) != len(want) {
		t.Fatalf("got %d errors, want %d:%s", len(got), len(want), report.String())
	}
	for i, w := range want {
		e := got[i]
		if e.File != path || e.Line != w.line || e.Column != w.col || e.Key != w.key || !strings.Contains(e.Msg, w.msg) {
			t.Errorf("error %d:\n got %d:%d %q %q at %q\nwant %d:%d %q containing %q at %q", i,
				e.Line, e.Column, e.Key, e.Msg, at(e.Line, e.Column), w.line, w.col, w.key, w.msg, at(w.line, w.col))
		}
	}
}

// Sizes have their own messages; each case is a file of its own since
// the key can appear only once.
func TestPipelineSizeErrors(t *testing.T) {
	for _, tc := range []struct{ value, msg string }{
		{"0", "must be between 1 byte and 1GiB, got 0"},
		{"-1", "must be between 1 byte and 1GiB, got -1"},
		{"2GiB", "must be between 1 byte and 1GiB, got 2GiB"},
		{"1073741825", "must be between 1 byte and 1GiB, got 1073741825"},
		{"99999999999999999999", "must be between 1 byte and 1GiB, got 99999999999999999999"},
		{"99999999999999999999KiB", "must be between 1 byte and 1GiB, got 99999999999999999999KiB"},
		{"0KiB", "must be between 1 byte and 1GiB, got 0KiB"},
		{"1.5MiB", `"1.5MiB" is not a size (expected a size in bytes such as 1048576 or "1MiB"; units: KiB, MiB, GiB, KB, MB, GB)`},
		{"1 XB", `"1 XB" is not a size`},
		{"MiB", `"MiB" is not a size`},
		{`"-1MiB"`, `"-1MiB" is not a size`},
		{"1.5", `expected a size in bytes such as 1048576 or "1MiB", got 1.5`},
		{"1e5", `expected a size in bytes such as 1048576 or "1MiB", got 1e5`},
		{"true", `expected a size in bytes such as 1048576 or "1MiB", got true`},
		{"[1]", `expected a size in bytes such as 1048576 or "1MiB", got a list`},
		{"~", `expected a size in bytes such as 1048576 or "1MiB", got null`},
	} {
		t.Run(tc.value, func(t *testing.T) {
			checkErrors(t, "toolmux.yaml", "pipeline:\n  validate:\n    max_argument_bytes: "+tc.value+"\n",
				[]wantErr{{3, 25, "pipeline.validate.max_argument_bytes", tc.msg}})
		})
	}
}

// The error kinds config accepts are exactly the tool package's kinds,
// read from its source so a kind added there cannot be forgotten here.
func TestPipelineErrorKinds(t *testing.T) {
	fset := token.NewFileSet()
	var kinds []string
	files, err := filepath.Glob("../tool/*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Kind" {
					continue
				}
				for _, v := range vs.Values {
					if lit, ok := v.(*ast.BasicLit); ok && lit.Kind == token.STRING {
						s, _ := strconv.Unquote(lit.Value)
						kinds = append(kinds, s)
					}
				}
			}
		}
	}
	if len(kinds) < 10 {
		t.Fatalf("found only %d kinds in ../tool: %v", len(kinds), kinds)
	}
	// Every kind is accepted...
	content := "pipeline:\n  rollback:\n    rules:\n      - kinds: [" + strings.Join(kinds, ", ") + "]\n"
	cfg, _ := mustLoad(t, "toolmux.yaml", content)
	if got := cfg.Pipeline.Rollback.Rules[0].Kinds; !slices.Equal(got, kinds) {
		t.Errorf("got %v, want %v", got, kinds)
	}
	// ...and no other.
	_, err = config.ParseWith("toolmux.yaml", []byte("pipeline: {rollback: {rules: [{kinds: [nope]}]}}"), config.Options{LookupEnv: envOf(nil)})
	var ce *config.Error
	if !errors.As(err, &ce) {
		t.Fatalf("got %v", err)
	}
	_, list, _ := strings.Cut(ce.Msg, "expected one of: ")
	list, _, _ = strings.Cut(list, ")")
	if accepted := strings.Split(list, ", "); !slices.Equal(accepted, kinds) {
		t.Errorf("config accepts %v\ntool defines %v", accepted, kinds)
	}
}

func shorten(s string) string {
	if len(s) > 24 {
		return s[:24] + "…"
	}
	return s
}
