// Package editdist measures how far apart two short strings are, for the
// "did you mean" suggestions of the catalog and the configuration and for
// the argument names repair takes as misspellings.
//
// Both distances are bounded: a caller only cares whether two strings are
// within a few edits, so each returns limit+1 for anything farther. Only
// the band of the matrix within limit of its diagonal is computed (a cell
// outside it is farther than limit), and the work stops as soon as a row
// is past limit, so the cost is O(len·limit): a key of a megabyte from a
// hostile file costs little.
package editdist

import "unicode/utf8"

// Levenshtein returns the Levenshtein distance of a and b counted in bytes
// (insertions, deletions and substitutions of one byte each), or limit+1
// when it is larger than limit. A negative limit means no limit.
func Levenshtein(a, b string, limit int) int {
	if limit < 0 {
		limit = max(len(a), len(b))
	}
	if len(a) < len(b) {
		a, b = b, a
	}
	if len(a)-len(b) > limit {
		return limit + 1
	}
	var pb, cb [64]int
	prev, cur := pb[:0], cb[:0]
	if len(b)+1 > len(pb) {
		prev, cur = make([]int, 0, len(b)+1), make([]int, 0, len(b)+1)
	}
	prev, cur = prev[:len(b)+1], cur[:len(b)+1]
	for j := range prev {
		prev[j] = j
	}
	far := limit + 1 // the value of every cell outside the band
	for i := 1; i <= len(a); i++ {
		lo, hi := max(1, i-limit), min(len(b), i+limit)
		cur[lo-1] = far
		if lo == 1 {
			cur[0] = i
		}
		rowMin := cur[lo-1]
		for j := lo; j <= hi; j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			rowMin = min(rowMin, cur[j])
		}
		if hi < len(b) {
			cur[hi+1] = far
		}
		// Every later row is at least this row's minimum.
		if rowMin > limit {
			return limit + 1
		}
		prev, cur = cur, prev
	}
	return min(prev[len(b)], limit+1)
}

// OSA returns the optimal string alignment distance of a and b counted in
// runes: Levenshtein's edits plus the transposition of two adjacent runes,
// the commonest typo in a hand-written key ("comamnd"). It returns limit+1
// when the distance is larger than limit; a negative limit means no limit.
func OSA(a, b string, limit int) int {
	na, nb := utf8.RuneCountInString(a), utf8.RuneCountInString(b)
	if limit < 0 {
		limit = max(na, nb)
	}
	if na-nb > limit || nb-na > limit {
		return limit + 1
	}
	ra, rb := []rune(a), []rune(b)
	// Three rows: a transposition looks two rows back.
	back, prev, cur := make([]int, nb+1), make([]int, nb+1), make([]int, nb+1)
	for j := range prev {
		prev[j] = j
	}
	far := limit + 1 // the value of every cell outside the band
	prevMin := 0
	for i := 1; i <= na; i++ {
		lo, hi := max(1, i-limit), min(nb, i+limit)
		cur[lo-1] = far
		if lo == 1 {
			cur[0] = i
		}
		rowMin := cur[lo-1]
		for j := lo; j <= hi; j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				cur[j] = min(cur[j], back[j-2]+1)
			}
			rowMin = min(rowMin, cur[j])
		}
		if hi < nb {
			cur[hi+1] = far
		}
		// A later row is at least the smaller of this row's minimum and
		// one more than the previous row's (a transposition reaches back
		// over one row).
		if rowMin > limit && prevMin >= limit {
			return limit + 1
		}
		prevMin = rowMin
		back, prev, cur = prev, cur, back
	}
	return min(prev[nb], limit+1)
}
