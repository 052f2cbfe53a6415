//go:build race

package plugin

// raceDetector is whether the tests run under -race, whose shadow memory (several bytes per
// byte of heap ever used) stays resident when the heap gives memory back: resident-memory
// measurements mean nothing then.
const raceDetector = true
