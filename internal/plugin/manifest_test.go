package plugin

import (
	"strings"
	"testing"

	"github.com/hermes-host/hermes-host/abi"
)

func TestEgressScopesValidated(t *testing.T) {
	info := &moduleInfo{exports: map[string]byte{abi.ExportSend: externFunc}}
	m := abi.Manifest{Name: "x", Version: "1", Kind: abi.KindPlatform, Platform: "x",
		MessageLimit: abi.MessageLimit{Max: 1, Unit: abi.UnitByte},
		EgressScopes: []abi.EgressScope{
			{Host: "*.com", Exports: []string{"send"}},
			{Host: "api.x.example"},
			{Host: "api.x.example", Exports: []string{"sned"}, Methods: []string{"post"}, Paths: []string{"bot[/x"}},
		}}
	err := checkManifest(&m, info, abi.Current())
	for _, want := range []string{"public suffix", "exports is empty", `unknown export "sned"`, `method "post"`, `path "bot[/x"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("want %q in %v", want, err)
		}
	}
}
