// Package jsonfloat writes floating-point numbers exactly as encoding/json
// does, without reflection or an encoder: the policy engine's argument
// text, the validator's size count and the event stream's encoder all
// need the bytes encoding/json would produce.
package jsonfloat

import (
	"math"
	"strconv"
)

// Append appends f as encoding/json writes a float64 (bits 64) or a
// float32 (bits 32, f holding a float32's value): the shortest decimal that
// reads back as the same number, in plain notation, switching to exponent
// notation below 1e-6 and from 1e21 with the exponent unpadded (like ES6).
//
// NaN and the infinities, which JSON cannot hold (encoding/json refuses
// them), are written as strconv writes them: "NaN", "+Inf", "-Inf". A
// caller that must produce JSON checks [Finite] first.
func Append(b []byte, f float64, bits int) []byte {
	if !Finite(f) {
		return strconv.AppendFloat(b, f, 'g', -1, bits)
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 {
		if bits == 64 && (abs < 1e-6 || abs >= 1e21) || bits == 32 && (float32(abs) < 1e-6 || float32(abs) >= 1e21) {
			format = 'e'
		}
	}
	b = strconv.AppendFloat(b, f, format, -1, bits)
	if format == 'e' {
		// e-09 becomes e-9.
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

// Finite reports whether f can be written as JSON: it is neither NaN nor
// an infinity.
func Finite(f float64) bool { return !math.IsInf(f, 0) && !math.IsNaN(f) }
