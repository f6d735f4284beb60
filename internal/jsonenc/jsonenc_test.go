package jsonenc

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzAppendString holds AppendString to encoding/json's bytes.
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "plain", `q"b\s`, "<a href='x'>&amp;</a>", "\x00\x1f\b\f\n\r\t\x7f",
		"é ü 日本", "\u2028\u2029", "bad \xff\xfe utf-8 \xe2\x80", "\U0001F600"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := AppendString([]byte("x"), s); !bytes.Equal(got[1:], want) || got[0] != 'x' {
			t.Fatalf("AppendString(%q) = %s, encoding/json %s", s, got[1:], want)
		}
	})
}
