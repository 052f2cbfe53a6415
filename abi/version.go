// Package abi is the contract between hermes-host and its plugins: the ABI version, the names of
// the exports a plugin provides and of the host functions it may call, and the JSON messages that
// cross the boundary. It imports neither wazero nor Extism, so guests, the host and tools share it.
//
// SPEC.md in this directory describes the same contract for authors in other languages.
package abi

import (
	"fmt"
	"strconv"
	"strings"
)

// The ABI version this package describes. A plugin declares the version it was built against by
// exporting a function named by MarkerName; the host reads that export without running any code.
const (
	Major = 1
	Minor = 2
)

// MarkerPrefix starts the name of the exported version marker, e.g. "hermes_abi_v1_2".
const MarkerPrefix = "hermes_abi_v"

// Version is an ABI version as read from a plugin's marker export.
type Version struct {
	Major, Minor int
}

// Current returns the ABI version of this build.
func Current() Version { return Version{Major, Minor} }

func (v Version) String() string { return fmt.Sprintf("%d.%d", v.Major, v.Minor) }

// MarkerName returns the export name that declares version v, e.g. "hermes_abi_v1_2".
func (v Version) MarkerName() string { return fmt.Sprintf("%s%d_%d", MarkerPrefix, v.Major, v.Minor) }

// ParseMarker reports the version declared by an export name, and false if the name is not a
// well-formed marker ("hermes_abi_v<major>_<minor>", decimal, no leading zeros or signs).
func ParseMarker(name string) (Version, bool) {
	rest, ok := strings.CutPrefix(name, MarkerPrefix)
	if !ok {
		return Version{}, false
	}
	maj, min, ok := strings.Cut(rest, "_")
	if !ok {
		return Version{}, false
	}
	a, okA := parseDecimal(maj)
	b, okB := parseDecimal(min)
	if !okA || !okB {
		return Version{}, false
	}
	return Version{a, b}, true
}

func parseDecimal(s string) (int, bool) {
	if s == "" || len(s) > 6 || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	n, err := strconv.Atoi(s)
	return n, err == nil
}

// Supports reports whether a host speaking version host can load a plugin built for version guest.
// The rule is semver for an ABI: the major versions must match, and the guest's minor version must
// be the host's current minor or the one before it (a newer guest may call host functions this
// host lacks; a much older one has had two minors to rebuild).
func (host Version) Supports(guest Version) error {
	switch {
	case guest.Major > host.Major:
		return fmt.Errorf("plugin is built for ABI %s, a newer major version than this host's ABI %s; upgrade hermes-host", guest, host)
	case guest.Major < host.Major:
		return fmt.Errorf("plugin is built for ABI %s, an older major version than this host's ABI %s; rebuild the plugin with a current SDK", guest, host)
	case guest.Minor > host.Minor:
		return fmt.Errorf("plugin is built for ABI %s, newer than this host's ABI %s; upgrade hermes-host", guest, host)
	case guest.Minor < host.Minor-1:
		return fmt.Errorf("plugin is built for ABI %s; this host supports %d.%d and %s; rebuild the plugin", guest, host.Major, host.Minor-1, host)
	}
	return nil
}
