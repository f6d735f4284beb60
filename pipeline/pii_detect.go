package pipeline

import (
	"regexp"
	"slices"
	"strings"

	"github.com/nyaruka/phonenumbers"
)

// Kinds of personal data and secrets the pii stage detects, as written in
// its rules (PIIRule.Kinds) and in its placeholders ("[email]").
const (
	PIIEmail  = "email"
	PIIPhone  = "phone"
	PIICard   = "card"
	PIIIBAN   = "iban"
	PIISecret = "secret"
)

// PIIKinds returns every kind the pii stage detects, in the order it
// looks for them.
func PIIKinds() []string { return []string{PIISecret, PIICard, PIIIBAN, PIIEmail, PIIPhone} }

// DefaultPIIRegions are the regions whose national phone formats are
// recognised when PIIOptions.Regions is nil; numbers in international
// format ("+44 20 7946 0958") are recognised whatever the regions.
func DefaultPIIRegions() []string { return []string{"US"} }

var (
	// emailShape is an address as people write it (the local part's
	// rarer characters, such as / and =, left out: they would take in
	// URLs); the domain ends in a top-level domain of letters.
	emailShape = regexp.MustCompile(`[A-Za-z0-9_%+-]+(?:\.[A-Za-z0-9_%+-]+)*@(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,24}\b`)
	// cardShape is 13 to 19 digits, in groups separated by one space or
	// dash; the Luhn check decides.
	cardShape = regexp.MustCompile(`\b[0-9](?:[ -]?[0-9]){12,18}\b`)
	// ibanShape is a country code, two check digits and up to 30 letters
	// and digits, whole or in groups of four; the mod-97 check decides.
	ibanShape = regexp.MustCompile(`\b[A-Z]{2}[0-9]{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,4})?\b`)
	// phoneShape is a candidate number: digits with the separators of the
	// usual formats, international (+) or national; libphonenumber
	// decides.
	phoneShape = regexp.MustCompile(`(?:\+|\(|\b)[0-9][0-9 ().\-]{5,20}[0-9]\b`)
	// secretShape is the record's own secret patterns (redact.go), so the
	// two never disagree on what a credential looks like.
	secretShape = regexp.MustCompile("(?:" + strings.Join(builtinSecretPatterns, ")|(?:") + ")")
)

// piiMatch is one finding in a string: its kind and byte span.
type piiMatch struct {
	kind       string
	start, end int
}

// piiDetector finds personal data in text.
type piiDetector struct {
	kinds   map[string]bool // the kinds looked for
	regions []string        // regions for national phone formats
}

// find returns the non-overlapping findings of the detector's kinds in s,
// in order. Kinds are looked for in PIIKinds' order, and a span already
// taken is not looked at again: a card number is not also a phone number.
//
// The regular expressions run only where they could match: on the short
// windows of s made of the characters their matches are made of (digits
// and separators for cards and phone numbers, capitals, digits and spaces
// for IBANs, the characters of an address around each @), each widened by
// one byte on either side so that \b sees what it would see in s; and,
// for secrets, only when s holds one of their literal hints. Most text
// has few such windows, and scanning for them is a loop over the bytes,
// where running the expressions over the whole text costs far more.
func (d *piiDetector) find(s string) []piiMatch {
	var out []piiMatch
	for _, kind := range PIIKinds() {
		if !d.kinds[kind] {
			continue
		}
		try := func(re *regexp.Regexp, valid func(s string, start, end int) (int, int, bool), lo, hi int) {
			for _, loc := range re.FindAllStringIndex(s[lo:hi], -1) {
				start, end, ok := valid(s, lo+loc[0], lo+loc[1])
				if ok && !overlaps(out, start, end) {
					out = append(out, piiMatch{kind: kind, start: start, end: end})
				}
			}
		}
		switch kind {
		case PIISecret:
			if hasSecretHint(s) {
				try(secretShape, whole, 0, len(s))
			}
		case PIICard:
			windows(s, isCardByte, isDigit, 13, func(lo, hi int) { try(cardShape, luhnSpan, lo, hi) })
		case PIIIBAN:
			windows(s, isIBANByte, isIBANChar, 15, func(lo, hi int) { try(ibanShape, ibanSpan, lo, hi) })
		case PIIEmail:
			emailWindows(s, func(lo, hi int) { try(emailShape, emailSpan, lo, hi) })
		case PIIPhone:
			windows(s, isPhoneByte, isDigit, 7, func(lo, hi int) { try(phoneShape, d.phoneSpan, lo, hi) })
		}
	}
	slices.SortFunc(out, func(a, b piiMatch) int { return a.start - b.start })
	return out
}

func isDigit(c byte) bool    { return c >= '0' && c <= '9' }
func isCardByte(c byte) bool { return isDigit(c) || c == ' ' || c == '-' }
func isPhoneByte(c byte) bool {
	return isDigit(c) || c == ' ' || c == '-' || c == '.' || c == '(' || c == ')' || c == '+'
}
func isIBANChar(c byte) bool   { return isDigit(c) || c >= 'A' && c <= 'Z' }
func isIBANByte(c byte) bool   { return isIBANChar(c) || c == ' ' }
func isEmailLocal(c byte) bool { return isDomainByte(c) || c == '_' || c == '%' || c == '+' }
func isDomainByte(c byte) bool {
	return isDigit(c) || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '.' || c == '-'
}

// windows calls f with each maximal run of bytes of s that in accepts and
// that holds at least least bytes need accepts, widened by one byte on
// either side (where s has one).
func windows(s string, in, need func(byte) bool, least int, f func(lo, hi int)) {
	for i := 0; i < len(s); {
		if !in(s[i]) {
			i++
			continue
		}
		j, n := i, 0
		for ; j < len(s) && in(s[j]); j++ {
			if need(s[j]) {
				n++
			}
		}
		if n >= least {
			f(max(i-1, 0), min(j+1, len(s)))
		}
		i = j
	}
}

// emailWindows calls f with the run of address bytes around each @,
// widened by one byte on either side.
func emailWindows(s string, f func(lo, hi int)) {
	for i := 0; i < len(s); {
		at := strings.IndexByte(s[i:], '@')
		if at < 0 {
			return
		}
		at += i
		lo, hi := at, at+1
		for lo > 0 && isEmailLocal(s[lo-1]) {
			lo--
		}
		for hi < len(s) && isDomainByte(s[hi]) {
			hi++
		}
		if lo < at && hi > at+1 {
			f(max(lo-1, 0), min(hi+1, len(s)))
		}
		i = hi
	}
}

func whole(_ string, start, end int) (int, int, bool) { return start, end, true }

func overlaps(ms []piiMatch, start, end int) bool {
	for _, m := range ms {
		if start < m.end && m.start < end {
			return true
		}
	}
	return false
}

// mask returns s with each finding replaced by its placeholder.
func maskPII(s string, ms []piiMatch) string {
	var b strings.Builder
	last := 0
	for _, m := range ms {
		b.WriteString(s[last:m.start])
		b.WriteString("[" + m.kind + "]")
		last = m.end
	}
	b.WriteString(s[last:])
	return b.String()
}

// luhnSpan accepts a card number that passes the Luhn check and starts
// with a digit of the major networks' ranges (2 to 6), which keeps out
// most numeric identifiers that pass Luhn by chance.
func luhnSpan(s string, start, end int) (int, int, bool) {
	if c := s[start]; c < '2' || c > '6' {
		return 0, 0, false
	}
	return start, end, luhn(s[start:end])
}

// luhn reports whether the digits of s (separators ignored) pass the Luhn
// check.
func luhn(s string) bool {
	sum, n := 0, 0
	for i := len(s) - 1; i >= 0; i-- {
		c := s[i]
		if c < '0' || c > '9' {
			continue
		}
		d := int(c - '0')
		if n%2 == 1 {
			if d *= 2; d > 9 {
				d -= 9
			}
		}
		sum += d
		n++
	}
	return n > 0 && sum%10 == 0
}

// ibanSpan accepts the longest prefix of the candidate, whole groups at a
// time, that passes the IBAN check: the regular expression may have taken
// a word after the number as one more group.
func ibanSpan(s string, start, end int) (int, int, bool) {
	for end > start {
		if validIBAN(s[start:end]) {
			return start, end, true
		}
		i := strings.LastIndexByte(s[start:end], ' ')
		if i < 0 {
			break
		}
		end = start + i
	}
	return 0, 0, false
}

// validIBAN reports whether s (spaces ignored) is 15 to 34 characters
// that pass the ISO 13616 mod-97 check.
func validIBAN(s string) bool {
	b := make([]byte, 0, 34)
	for i := 0; i < len(s); i++ {
		if s[i] != ' ' {
			b = append(b, s[i])
		}
	}
	if len(b) < 15 || len(b) > 34 {
		return false
	}
	// The first four characters move to the end; letters count as 10..35.
	rem := 0
	for _, c := range append(b[4:], b[:4]...) {
		switch {
		case c >= '0' && c <= '9':
			rem = (rem*10 + int(c-'0')) % 97
		case c >= 'A' && c <= 'Z':
			rem = (rem*100 + int(c-'A'+10)) % 97
		default:
			return false
		}
	}
	return rem == 1
}

// emailSpan accepts an address unless it sits in the user info, host or
// path of a URL ("https://user@host/", "https://cdn.example/pkg@1.2/x",
// "https://site/u/a@b.io/"): those are names of things, not addresses. In
// a query ("?to=a@b.io") it is an address.
func emailSpan(s string, start, end int) (int, int, bool) {
	// The token the match is in: back to the last space or quote.
	tok := strings.LastIndexAny(s[:start], " \t\r\n\"'<>()[]{}") + 1
	prefix := s[tok:start]
	if i := strings.Index(prefix, "://"); i >= 0 && !strings.ContainsAny(prefix[i:], "?#") {
		return 0, 0, false
	}
	return start, end, true
}

// phoneSpan accepts a candidate that libphonenumber finds valid: in
// international format (+), for its country; otherwise in one of the
// detector's regions, and only when written with separators, since a bare
// run of digits is far more often an identifier or a time stamp.
func (d *piiDetector) phoneSpan(s string, start, end int) (int, int, bool) {
	for start < end && (s[start] == ' ' || s[start] == '.' || s[start] == '-') {
		start++
	}
	cand := s[start:end]
	// A parenthesis opens the match only when it is the area code's.
	if cand[0] == '(' && !strings.Contains(cand, ")") {
		start++
		cand = cand[1:]
	}
	// Part of a longer number or word ("v1.2.3-4567890", "12+345"):
	// not a number of its own.
	if start > 0 {
		if c := s[start-1]; c == '+' || c == '.' || c == '-' || c == '/' || c >= '0' && c <= '9' {
			return 0, 0, false
		}
	}
	// Followed by more of a longer thing: a time ("2024-01-15 10:30"), a
	// version, a path.
	if end < len(s) {
		if c := s[end]; c == ':' || c == '/' || (c == '.' || c == '-') && end+1 < len(s) && s[end+1] >= '0' && s[end+1] <= '9' {
			return 0, 0, false
		}
	}
	n := 0
	for i := 0; i < len(cand); i++ {
		if cand[i] >= '0' && cand[i] <= '9' {
			n++
		}
	}
	if n < 7 || n > 15 {
		return 0, 0, false
	}
	if cand[0] == '+' {
		num, err := phonenumbers.Parse(cand, "ZZ")
		return start, end, err == nil && phonenumbers.IsValidNumber(num)
	}
	// A bare run of digits, or a date ("2024-01-15 1030"): no national
	// format begins with a four-digit group and a dash or slash.
	if n == len(cand) || len(cand) > 4 && isDigits(cand[:4]) && (cand[4] == '-' || cand[4] == '/') {
		return 0, 0, false
	}
	for _, r := range d.regions {
		num, err := phonenumbers.Parse(cand, r)
		if err == nil && phonenumbers.IsValidNumberForRegion(num, r) {
			return start, end, true
		}
	}
	return 0, 0, false
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}
