package gateway

import (
	"slices"
	"testing"
)

func TestChildEnvDropsSecrets(t *testing.T) {
	t.Parallel()
	got := childEnv([]string{"PATH=/bin", "TELEGRAM_BOT_TOKEN=123:abc", "HERMES_SESSION_ID=old", "HOME=/root"},
		[]string{"TELEGRAM_BOT_TOKEN"})
	if !slices.Equal(got, []string{"PATH=/bin", "HOME=/root"}) {
		t.Fatalf("child env %q", got)
	}
}
