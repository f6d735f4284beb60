package pipeline

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/toolmux/toolmux/tool"
)

func allKinds() *piiDetector {
	d := &piiDetector{kinds: map[string]bool{}, regions: []string{"US", "GB"}}
	for _, k := range PIIKinds() {
		d.kinds[k] = true
	}
	return d
}

// The detectors: true positives, and the near misses that look like them.
func TestPIIDetectors(t *testing.T) {
	d := allKinds()
	for _, tc := range []struct {
		name, in string
		want     []string // "kind:value" of each finding, in order
	}{
		{"email", "write to jane.doe+tag@example.co.uk today", []string{"email:jane.doe+tag@example.co.uk"}},
		{"email in a query", "https://x.example/send?to=bob@example.com", []string{"email:bob@example.com"}},
		{"email in a URL path", "https://cdn.example.com/u/bob@example.com/profile", nil},
		{"URL user info", "https://deploy@git.example.org/repo.git", nil},
		{"package version", "npm i lodash@4.17.21", nil},
		{"at a handle", "@someone said hi", nil},
		{"two emails", "a@b.io, c@d.io", []string{"email:a@b.io", "email:c@d.io"}},

		{"E.164", "call +14155552671 now", []string{"phone:+14155552671"}},
		{"international, spaced", "London: +44 20 7946 0958.", []string{"phone:+44 20 7946 0958"}},
		{"US national", "office (415) 555-2671 ext", []string{"phone:(415) 555-2671"}},
		{"GB national", "ring 020 7946 0958", []string{"phone:020 7946 0958"}},
		{"bare digits", "order 4155552671 shipped", nil},
		{"date and time", "at 2024-01-15 10:30:00", nil},
		{"version", "v1.2.3 build 20240115", nil},
		{"invalid international", "+1 000 000 0000", nil},

		{"Visa", "card 4111 1111 1111 1111 exp", []string{"card:4111 1111 1111 1111"}},
		{"Mastercard dashes", "5555-5555-5555-4444", []string{"card:5555-5555-5555-4444"}},
		{"Amex", "378282246310005", []string{"card:378282246310005"}},
		{"16 digits failing Luhn", "4111 1111 1111 1112", nil},
		{"Luhn but not a card range", "0000 0000 0000 0000", nil},

		{"IBAN grouped", "pay GB82 WEST 1234 5698 7654 32 please", []string{"iban:GB82 WEST 1234 5698 7654 32"}},
		{"IBAN whole", "DE89370400440532013000", []string{"iban:DE89370400440532013000"}},
		{"IBAN then a word", "GB82WEST12345698765432 ABCD", []string{"iban:GB82WEST12345698765432"}},
		{"IBAN bad check", "GB82 WEST 1234 5698 7654 33", nil},

		{"AWS key", "key=AKIAIOSFODNN7EXAMPLE", []string{"secret:AKIAIOSFODNN7EXAMPLE"}},
		// The pattern takes bearer in any case, and so must the hint
		// that decides whether it runs.
		{"bearer, any case", "auth: bEaReR abcdefgh12345678", []string{"secret:bEaReR abcdefgh12345678"}},
		{"GitHub classic", "ghp_" + strings.Repeat("a1B2", 9), []string{"secret:ghp_" + strings.Repeat("a1B2", 9)}},
		{"GitHub fine-grained", "github_pat_11ABCDEFG0123456789_abcdefXYZ", []string{"secret:github_pat_11ABCDEFG0123456789_abcdefXYZ"}},
		{"Slack", "xoxb-1234567890-abcdefghij", []string{"secret:xoxb-1234567890-abcdefghij"}},
		{"OpenAI", "sk-proj-abcdefghijklmnopqrstuv", []string{"secret:sk-proj-abcdefghijklmnopqrstuv"}},
		{"Anthropic", "sk-ant-api03-abcdefghijklmnopqrstuv", []string{"secret:sk-ant-api03-abcdefghijklmnopqrstuv"}},
		{"Google", "AIzaSyA1234567890abcdefghijklmnopqrstuv", []string{"secret:AIzaSyA1234567890abcdefghijklmnopqrstuv"}},
		{"JWT", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlX2hlcmU", []string{"secret:eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlX2hlcmU"}},
		{"short sk-", "sk-short", nil},
		{"AKIA too short", "AKIA1234", nil},

		{"mixed", "jane@ex.io 4111111111111111 +14155552671",
			[]string{"email:jane@ex.io", "card:4111111111111111", "phone:+14155552671"}},
		{"nothing", "the quick brown fox, 42 times", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, m := range d.find(tc.in) {
				got = append(got, m.kind+":"+tc.in[m.start:m.end])
			}
			if strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Errorf("find(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// Only the kinds asked for are looked for.
func TestPIIDetectorKinds(t *testing.T) {
	d := &piiDetector{kinds: map[string]bool{PIIEmail: true}, regions: DefaultPIIRegions()}
	ms := d.find("jane@ex.io +14155552671 4111111111111111")
	if len(ms) != 1 || ms[0].kind != PIIEmail {
		t.Errorf("find = %+v, want the email alone", ms)
	}
}

func TestMaskPII(t *testing.T) {
	d := allKinds()
	in := "mail jane@ex.io or call +14155552671, card 4111111111111111."
	if got, want := maskPII(in, d.find(in)), "mail [email] or call [phone], card [card]."; got != want {
		t.Errorf("maskPII = %q, want %q", got, want)
	}
}

// FuzzPIIDetect feeds the detector untrusted text: it never panics, its
// findings are in bounds, in order, apart, and valid for their kind, and
// the masked text keeps none of them.
// builtinSecrets is the record's masking's alternation of the built-in
// secret patterns.
var builtinSecrets = alternation(builtinSecretPatterns)

func FuzzPIIDetect(f *testing.F) {
	for _, s := range []string{
		"jane@ex.io", "+44 20 7946 0958", "(415) 555-2671", "4111 1111 1111 1111", "GB82 WEST 1234 5698 7654 32",
		"AKIAIOSFODNN7EXAMPLE", "https://u@h.example/a@b.io?x=c@d.io", "2024-01-15 10:30", "+", "@", "(",
		"\xff\xfe+1 415 555 2671", "GB82WEST12345698765432 ABCD", "x bEaReR abcdefgh12345678",
	} {
		f.Add(s)
	}
	d := allKinds()
	f.Fuzz(func(t *testing.T, s string) {
		ms := d.find(s)
		last := 0
		for _, m := range ms {
			if m.start < last || m.end <= m.start || m.end > len(s) {
				t.Fatalf("find(%q): bad span %+v after %d", s, m, last)
			}
			last = m.end
			v := s[m.start:m.end]
			switch m.kind {
			case PIICard:
				if !luhn(v) {
					t.Fatalf("find(%q): card %q fails Luhn", s, v)
				}
			case PIIIBAN:
				if !validIBAN(v) {
					t.Fatalf("find(%q): IBAN %q fails mod 97", s, v)
				}
			case PIIEmail:
				if !strings.Contains(v, "@") {
					t.Fatalf("find(%q): email %q without @", s, v)
				}
			}
		}
		// The hints gate the secret patterns (here and in the record's
		// masking): a string they match must hold one.
		if builtinSecrets.MatchString(s) && !hasSecretHint(s) {
			t.Fatalf("%q matches a built-in secret pattern but holds no hint", s)
		}
		masked := maskPII(s, ms)
		if utf8.ValidString(s) && !utf8.ValidString(masked) {
			t.Fatalf("maskPII(%q) = %q: not UTF-8", s, masked)
		}
		if len(ms) > 0 && masked == s {
			t.Fatalf("maskPII(%q) changed nothing", s)
		}
	})
}

// Structured content is walked like arguments, each finding named by its
// JSON pointer; the listed findings stop at MaxFindings, the rest
// counted.
func TestPIIStructuredAndBound(t *testing.T) {
	list := []any{}
	for i := range 4 {
		list = append(list, map[string]any{"mail": fmt.Sprintf("u%d@example.org", i)})
	}
	s := &scripted{answers: map[string]func(tool.Call) *tool.Record{"a/b": func(call tool.Call) *tool.Record {
		return okWith(call, &tool.Result{Content: []tool.Content{{Type: tool.ContentText, Text: "see structured"}},
			Structured: map[string]any{"people": list, "a/b": "x@example.org"}})
	}}}
	mw, err := NewPII(PIIOptions{Rules: []PIIRule{{Kinds: []string{PIIEmail}, Action: PIIMask}}, MaxFindings: 3})
	if err != nil {
		t.Fatal(err)
	}
	rec := mw(s).Call(context.Background(), tool.Call{Server: "a", Tool: "b"})
	st := rec.Result.Structured.(map[string]any)
	if st["a/b"] != "[email]" || st["people"].([]any)[3].(map[string]any)["mail"] != "[email]" {
		t.Errorf("structured not masked: %v", st)
	}
	if list[0].(map[string]any)["mail"] != "u0@example.org" {
		t.Error("the tool's own value was modified")
	}
	var n tool.Note
	for _, x := range rec.Notes {
		if x.Layer == NamePII {
			n = x
		}
	}
	fs, _ := n.Data["findings"].([]any)
	if len(fs) != 3 || n.Data["more"] != 2 || fs[0].(map[string]any)["path"] != "/structuredContent/a~1b" {
		t.Errorf("note %+v: want 3 findings listed (sorted, the key escaped), 2 more", n)
	}
}

// Every built-in secret pattern's matches hold one of secretHints, which
// the pii stage checks before running the patterns: a sample per pattern,
// in the patterns' order, matched by it and holding a hint.
func TestSecretHintsCoverPatterns(t *testing.T) {
	samples := []string{
		"Authorization: bEARER abcdefgh12345678",
		"sk-ant-api03-abcdefghijklmnopqrstuv",
		"AKIAIOSFODNN7EXAMPLE",
		"ghp_" + strings.Repeat("a1B2", 9),
		"github_pat_11ABCDEFG0123456789_abcdefXYZ",
		"xoxb-1234567890-abcdefghij",
		"AIzaSyA1234567890abcdefghijklmnopqrstuv",
		"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlX2hlcmU",
		"-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----",
	}
	if len(samples) != len(builtinSecretPatterns) {
		t.Fatalf("%d samples for %d patterns: add one for the new pattern, and its hint", len(samples), len(builtinSecretPatterns))
	}
	for i, p := range builtinSecretPatterns {
		if !regexp.MustCompile(p).MatchString(samples[i]) || !hasSecretHint(samples[i]) {
			t.Errorf("pattern %d %q: sample %q matched %v, hint %v", i, p, samples[i],
				regexp.MustCompile(p).MatchString(samples[i]), hasSecretHint(samples[i]))
		}
	}
}

// A path never shows personal data held in a key: the key is named with
// it masked, whatever kinds the rules look for.
func TestPIIPathMasksKeys(t *testing.T) {
	s := &scripted{answers: map[string]func(tool.Call) *tool.Record{"a/b": answerText("ok")}}
	mw, err := NewPII(PIIOptions{Rules: []PIIRule{{Kinds: []string{PIIPhone}, Action: PIINote}}})
	if err != nil {
		t.Fatal(err)
	}
	rec := mw(s).Call(context.Background(), tool.Call{Server: "a", Tool: "b",
		Arguments: map[string]any{"contacts": map[string]any{"jane@example.org": "+44 20 7946 0958"}}})
	var n tool.Note
	for _, x := range rec.Notes {
		if x.Layer == NamePII {
			n = x
		}
	}
	fs, _ := n.Data["findings"].([]any)
	if len(fs) != 1 || fs[0].(map[string]any)["path"] != "/contacts/[email]" || strings.Contains(n.Message, "jane") {
		t.Errorf("note %+v: want the phone at /contacts/[email]", n)
	}
}

// A failed call's error is part of what comes back: a server's message
// quoting what it was sent is masked like a result.
func TestPIIMasksErrors(t *testing.T) {
	s := &scripted{answers: map[string]func(tool.Call) *tool.Record{"a/b": func(call tool.Call) *tool.Record {
		return failWith(call, tool.KindToolError, "no account for jane@example.org")
	}}}
	mw, err := NewPII(PIIOptions{Rules: []PIIRule{{Kinds: []string{PIIEmail}, On: []string{PIIResult}, Action: PIIMask}}})
	if err != nil {
		t.Fatal(err)
	}
	rec := mw(s).Call(context.Background(), tool.Call{Server: "a", Tool: "b"})
	if tool.KindOf(rec.Err()) != tool.KindToolError || rec.Error.Message != "no account for [email]" {
		t.Errorf("error %+v, want the tool_error with the address masked", rec.Error)
	}
	if len(rec.Notes) != 1 || !strings.Contains(rec.Notes[0].Message, "email at /error/message (masked)") {
		t.Errorf("notes %+v", rec.Notes)
	}
}
