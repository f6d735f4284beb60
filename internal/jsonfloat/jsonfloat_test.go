package jsonfloat

import (
	"encoding/json"
	"math"
	"testing"
)

func TestAppend(t *testing.T) {
	for _, tc := range []struct {
		f    float64
		bits int
		want string
	}{
		{0, 64, "0"},
		{math.Copysign(0, -1), 64, "-0"},
		{1, 64, "1"},
		{-2.5, 64, "-2.5"},
		{0.1, 64, "0.1"},
		{1e-6, 64, "0.000001"},
		{1e-7, 64, "1e-7"},
		{1.5e-9, 64, "1.5e-9"},
		{1e20, 64, "100000000000000000000"},
		{1e21, 64, "1e+21"},
		{123456789e100, 64, "1.23456789e+108"},
		{math.MaxFloat64, 64, "1.7976931348623157e+308"},
		{math.SmallestNonzeroFloat64, 64, "5e-324"},
		{float64(float32(0.1)), 32, "0.1"},
		{float64(float32(1e-7)), 32, "1e-7"},
		{float64(float32(3.4e38)), 32, "3.4e+38"},
		{math.NaN(), 64, "NaN"},
		{math.Inf(1), 64, "+Inf"},
		{math.Inf(-1), 32, "-Inf"},
	} {
		if got := string(Append([]byte("x"), tc.f, tc.bits)); got != "x"+tc.want {
			t.Errorf("Append(%v, %d) = %q, want %q", tc.f, tc.bits, got, "x"+tc.want)
		}
	}
}

func TestFinite(t *testing.T) {
	if !Finite(0) || !Finite(-math.MaxFloat64) || Finite(math.NaN()) || Finite(math.Inf(1)) || Finite(math.Inf(-1)) {
		t.Error("Finite is wrong")
	}
}

// FuzzAppend holds Append to encoding/json's output for every finite
// float64 and float32.
func FuzzAppend(f *testing.F) {
	for _, v := range []float64{0, 1, -1, 0.1, 1e-6, 1e-7, 1e20, 1e21, 5e-324, math.MaxFloat64, 3.4e38, 1.401298464324817e-45} {
		f.Add(math.Float64bits(v))
	}
	f.Fuzz(func(t *testing.T, bits uint64) {
		v := math.Float64frombits(bits)
		if !Finite(v) {
			if got := string(Append(nil, v, 64)); got != "NaN" && got != "+Inf" && got != "-Inf" {
				t.Fatalf("Append(%v) = %q", v, got)
			}
			return
		}
		want, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if got := Append(nil, v, 64); string(got) != string(want) {
			t.Fatalf("Append(%v, 64) = %s, encoding/json writes %s", v, got, want)
		}
		v32 := float32(v)
		if !Finite(float64(v32)) {
			return
		}
		want, err = json.Marshal(v32)
		if err != nil {
			t.Fatal(err)
		}
		if got := Append(nil, float64(v32), 32); string(got) != string(want) {
			t.Fatalf("Append(%v, 32) = %s, encoding/json writes %s", v32, got, want)
		}
	})
}
