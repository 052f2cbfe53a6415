package approval

import (
	"testing"

	"github.com/hermes-host/hermes-host/internal/store/storetest"
)

// The schema is the same text in both dialects, and that text is what translating it gives.
func TestMigrationsInBothDialects(t *testing.T) { storetest.CheckMigrations(t, migrations) }
