package process_test

import (
	"os"
	"os/exec"
	"testing"
)

// TestMain lets the test binary act as the host: Run starts os.Args[0] with EnvDataDir set.
func TestMain(m *testing.M) {
	if code, ran := MainFromEnv(); ran {
		os.Exit(code)
	}
	if code, ran := secretHostFromEnv(); ran {
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// TestCrashRecovery kills a real host process with SIGKILL twice and checks that every
// background process is reported exactly once.
func TestCrashRecovery(t *testing.T) {
	Run(t, func() *exec.Cmd { return exec.Command(os.Args[0], "-test.run=^$") })
}
