package web

import (
	"bytes"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/net/html"
	"golang.org/x/net/html/charset"
	"golang.org/x/text/encoding"
)

// decodeText returns a text body as UTF-8: decoded from the charset the
// server named, else taken as UTF-8 (a byte-order mark decides between
// UTF-8 and UTF-16), with invalid bytes replaced so the result is always
// valid UTF-8.
func decodeText(body []byte, label string) string {
	if enc := lookupCharset(label, body); enc != nil {
		if out, err := enc.NewDecoder().Bytes(body); err == nil {
			body = out
		}
	}
	body = bytes.TrimPrefix(body, []byte("\uFEFF"))
	return strings.ToValidUTF8(string(body), "\uFFFD")
}

// lookupCharset returns the decoder of a non-UTF-8 body, or nil for UTF-8
// and for unknown labels.
func lookupCharset(label string, body []byte) encoding.Encoding {
	if label == "" {
		switch {
		case bytes.HasPrefix(body, []byte{0xFE, 0xFF}):
			label = "utf-16be"
		case bytes.HasPrefix(body, []byte{0xFF, 0xFE}):
			label = "utf-16le"
		default:
			return nil
		}
	}
	enc, name := charset.Lookup(label)
	if enc == nil || name == "utf-8" {
		return nil
	}
	return enc
}

// decodeHTML returns an HTML body as UTF-8, the encoding decided as
// browsers decide it: byte-order mark, then the Content-Type charset, then
// <meta> tags in the first KiB, then UTF-8.
func decodeHTML(body []byte, label string) []byte {
	ct := "text/html"
	if label != "" {
		ct += "; charset=" + label
	}
	enc, name, _ := charset.DetermineEncoding(body, ct)
	if name != "utf-8" && enc != nil {
		if out, err := enc.NewDecoder().Bytes(body); err == nil {
			return out
		}
	}
	if utf8.Valid(body) {
		return body
	}
	return []byte(strings.ToValidUTF8(string(body), "\uFFFD"))
}

// excerpt returns the start of a body as one short line: its visible text
// for HTML (an error page's markup says little), else the text itself, with
// runs of white space collapsed. It returns "" for binary bodies.
func excerpt(body []byte, isHTML bool) string {
	var s string
	if isHTML {
		s = visibleText(body, 4*excerptLen)
	} else {
		if bytes.IndexByte(body, 0) >= 0 {
			return ""
		}
		s = strings.ToValidUTF8(string(body), "\uFFFD")
	}
	s = strings.Join(strings.Fields(s), " ")
	return cut(s, excerptLen)
}

// cut shortens s to at most n runes, marking the cut with "…".
func cut(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return strings.TrimRightFunc(string(r[:n]), unicode.IsSpace) + "…"
}

// visibleText collects the text of an HTML fragment outside script, style
// and head elements, up to about limit bytes.
func visibleText(body []byte, limit int) string {
	z := html.NewTokenizer(bytes.NewReader(body))
	var b strings.Builder
	skip := 0
	for b.Len() < limit {
		switch z.Next() {
		case html.ErrorToken:
			return b.String()
		case html.StartTagToken:
			if name, _ := z.TagName(); isInvisible(string(name)) {
				skip++
			}
		case html.EndTagToken:
			if name, _ := z.TagName(); isInvisible(string(name)) && skip > 0 {
				skip--
			}
		case html.TextToken:
			if skip == 0 {
				b.Write(z.Text())
				b.WriteByte(' ')
			}
		}
	}
	return b.String()
}

// isInvisible reports whether an element's text is not shown to readers.
func isInvisible(tag string) bool {
	switch tag {
	case "script", "style", "head", "noscript", "template":
		return true
	}
	return false
}
