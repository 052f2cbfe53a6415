package abischema

import (
	"bytes"
	"flag"
	"os"
	"testing"
)

var update = flag.Bool("update", false, "rewrite abi/schema/abi.schema.json")

const checkedIn = "abi/schema/abi.schema.json"

// The checked-in schema is what the Go types generate.
func TestCheckedInSchemaMatchesTheTypes(t *testing.T) {
	t.Chdir("../..")
	got, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(checkedIn, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(checkedIn)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is out of date with package abi: run go test ./internal/abischema -update", checkedIn)
	}
}
