package clock

import (
	"time"

	"github.com/hermes-host/hermes-host/conformance/fakeclock"
)

// Manual is the project's one fake clock, fakeclock.Clock, under the name it had here before
// the two were merged: a clock that moves only when told (Set, Advance), whose waiters wake when
// time passes what they wait for.
//
// Deprecated: use fakeclock.Clock; this name stays only so that work begun against it still
// builds.
type Manual = fakeclock.Clock

// NewManual returns a Manual clock reading t.
//
// Deprecated: use fakeclock.New.
func NewManual(t time.Time) *Manual { return fakeclock.New(t) }
