package abi

import (
	"strings"
	"testing"
)

func TestSupportsSaysWhichSideToUpgrade(t *testing.T) {
	host := Version{1, 3}
	for _, c := range []struct {
		guest Version
		want  string // "" = supported
	}{
		{Version{1, 3}, ""},
		{Version{1, 2}, ""},
		{Version{1, 1}, "rebuild the plugin"},
		{Version{1, 4}, "upgrade hermes-host"},
		{Version{2, 0}, "upgrade hermes-host"},
		{Version{0, 9}, "rebuild the plugin"},
	} {
		err := host.Supports(c.guest)
		if (err == nil) != (c.want == "") || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("host %s, guest %s: %v; want %q", host, c.guest, err, c.want)
		}
	}
}

func TestParseMarker(t *testing.T) {
	for name, want := range map[string]bool{
		"hermes_abi_v1_0": true, "hermes_abi_v12_34": true, "hermes_abi_v01_0": false, "hermes_abi_v1_": false,
		"hermes_abi_v1_0_0": false, "hermes_abi_v-1_0": false, "hermes_abi_v1_+2": false, "describe": false,
	} {
		if _, ok := ParseMarker(name); ok != want {
			t.Errorf("ParseMarker(%q) ok = %v, want %v", name, ok, want)
		}
	}
	if v, _ := ParseMarker(Current().MarkerName()); v != Current() {
		t.Fatalf("marker round trip: %v", v)
	}
}
