package editdist

import (
	"strings"
	"testing"
)

func TestLevenshtein(t *testing.T) {
	for _, tc := range []struct {
		a, b  string
		limit int
		want  int
	}{
		{"", "", 2, 0},
		{"read_file", "read_file", 2, 0},
		{"read_file", "read_fil", 2, 1},
		{"read_file", "raed_file", 2, 2}, // a transposition is two edits here
		{"kitten", "sitting", -1, 3},
		{"kitten", "sitting", 3, 3},
		{"kitten", "sitting", 2, 3}, // over the limit: limit+1
		{"a", strings.Repeat("a", 100), 2, 3},
		{strings.Repeat("x", 200), strings.Repeat("y", 200), 5, 6}, // beyond the stack rows
		{strings.Repeat("x", 200), strings.Repeat("x", 199) + "y", 5, 1},
		{"é", "e", -1, 2}, // bytes: é is two
	} {
		if got := Levenshtein(tc.a, tc.b, tc.limit); got != tc.want {
			t.Errorf("Levenshtein(%q, %q, %d) = %d, want %d", tc.a, tc.b, tc.limit, got, tc.want)
		}
		if got := Levenshtein(tc.b, tc.a, tc.limit); got != tc.want {
			t.Errorf("Levenshtein(%q, %q, %d) = %d, want %d (not symmetric)", tc.b, tc.a, tc.limit, got, tc.want)
		}
	}
}

// Long strings of similar length cost O(len·limit), not O(len²): a
// megabyte each would otherwise take hours. (Hostile files may hold keys
// that long.)
func TestLongInputBanded(t *testing.T) {
	a := strings.Repeat("ab", 1<<19)
	b := a[:len(a)-3] + "xyz"
	if got := Levenshtein(a, b, 2); got != 3 {
		t.Errorf("Levenshtein = %d, want 3", got)
	}
	if got := OSA(a, b, 2); got != 3 {
		t.Errorf("OSA = %d, want 3", got)
	}
	if got := OSA(a, a[:len(a)-1]+"c", 2); got != 1 {
		t.Errorf("OSA = %d, want 1", got)
	}
}

func TestOSA(t *testing.T) {
	for _, tc := range []struct {
		a, b  string
		limit int
		want  int
	}{
		{"", "", 2, 0},
		{"command", "command", 2, 0},
		{"command", "comamnd", 2, 1}, // one transposition
		{"command", "Command", 2, 1},
		{"ca", "abc", -1, 3}, // OSA, not Damerau: no edit of a transposed pair
		{"env", "cwd", 2, 3},
		{"é", "e", -1, 1}, // runes
		{"timeout", strings.Repeat("t", 1<<16), 2, 3},
		{strings.Repeat("ab", 40), strings.Repeat("ba", 40), -1, 2},
	} {
		if got := OSA(tc.a, tc.b, tc.limit); got != tc.want {
			t.Errorf("OSA(%q, %q, %d) = %d, want %d", tc.a, tc.b, tc.limit, got, tc.want)
		}
	}
}

// ref is the textbook full-matrix definition: Levenshtein over the bytes
// a and b, or (a nil) over the runes ra and rb, with transpositions (OSA)
// when transpose is set.

func ref(ra, rb []rune, transpose bool, a, b []byte) int {
	n, m := len(ra), len(rb)
	eq := func(i, j int) bool { return ra[i] == rb[j] }
	if a != nil {
		n, m = len(a), len(b)
		eq = func(i, j int) bool { return a[i] == b[j] }
	}
	d := make([][]int, n+1)
	for i := range d {
		d[i] = make([]int, m+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= n; i++ {
		for j := 1; j <= m; j++ {
			cost := 1
			if eq(i-1, j-1) {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if transpose && i > 1 && j > 1 && eq(i-1, j-2) && eq(i-2, j-1) {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[n][m]
}

// FuzzDistance checks both bounded distances against the full-matrix
// definitions, for every limit up to the true distance.
func FuzzDistance(f *testing.F) {
	for _, p := range [][2]string{{"", ""}, {"kitten", "sitting"}, {"comamnd", "command"}, {"ab", "ba"}, {"é", "e"}, {"abcd", "badc"}} {
		f.Add(p[0], p[1], 2)
	}
	f.Fuzz(func(t *testing.T, a, b string, limit int) {
		if len(a) > 100 || len(b) > 100 {
			return
		}
		limit = limit%8 - 1 // -1 (no limit) to 6
		lev := ref(nil, nil, false, []byte(a), []byte(b))
		osa := ref([]rune(a), []rune(b), true, nil, nil)
		wantLev, wantOSA := lev, osa
		if limit >= 0 {
			wantLev, wantOSA = min(lev, limit+1), min(osa, limit+1)
		}
		if got := Levenshtein(a, b, limit); got != wantLev {
			t.Fatalf("Levenshtein(%q, %q, %d) = %d, want %d", a, b, limit, got, wantLev)
		}
		if got := OSA(a, b, limit); got != wantOSA {
			t.Fatalf("OSA(%q, %q, %d) = %d, want %d", a, b, limit, got, wantOSA)
		}
	})
}
