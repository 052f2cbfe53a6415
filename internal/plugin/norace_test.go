//go:build !race

package plugin

// raceDetector: see race_test.go.
const raceDetector = false
