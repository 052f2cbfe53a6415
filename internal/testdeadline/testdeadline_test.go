package testdeadline

import (
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	for in, want := range map[string]float64{"": 1, "3": 3, "2.5": 2.5, "0.5": 1, "0": 1, "-2": 1, "x": 1, "1000": 1} {
		if got := parse(in); got != want {
			t.Errorf("parse(%q) = %v, want %v", in, got, want)
		}
	}
}

func TestScaleNeverShortens(t *testing.T) {
	if d := Scale(time.Second); d < time.Second || d != time.Duration(float64(time.Second)*Factor()) {
		t.Fatalf("Scale(1s) = %v with factor %v", d, Factor())
	}
}
