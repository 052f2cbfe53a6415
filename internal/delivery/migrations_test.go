package delivery

import (
	"testing"

	"github.com/hermes-host/hermes-host/internal/store/storetest"
)

// Each migration's PostgreSQL text is its SQLite text translated (storetest.CheckMigrations): a
// PostgreSQL database migrated by an earlier version, which translated at run time, has the
// schema a new one gets.
func TestMigrationsInBothDialects(t *testing.T) { storetest.CheckMigrations(t, migrations) }
