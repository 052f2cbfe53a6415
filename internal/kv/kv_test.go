package kv

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/store"
)

func TestNamespacesAreSeparateAndDurable(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "h.db")
	db, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	must(t, s.Set(ctx, "telegram", "main", "offset", []byte("41")))
	must(t, s.Set(ctx, "telegram", "work", "offset", []byte("7")))
	must(t, s.Set(ctx, "telegram", "main", "offset", []byte("42")))
	db.Close()

	db, err = store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s, err = Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ plugin, profile, want string }{
		{"telegram", "main", "42"}, {"telegram", "work", "7"}, {"slack", "main", ""},
	} {
		v, found, err := s.Get(ctx, c.plugin, c.profile, "offset")
		must(t, err)
		if found != (c.want != "") || string(v) != c.want {
			t.Errorf("%s/%s: got %q found=%v, want %q", c.plugin, c.profile, v, found, c.want)
		}
	}
	must(t, s.Delete(ctx, "telegram", "main", "offset"))
	must(t, s.Delete(ctx, "telegram", "main", "offset"))
	if _, found, _ := s.Get(ctx, "telegram", "main", "offset"); found {
		t.Error("deleted key still found")
	}
}

func TestLimits(t *testing.T) {
	ctx := context.Background()
	db, err := store.Open(filepath.Join(t.TempDir(), "h.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s, err := Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Set(ctx, "p", "main", strings.Repeat("k", MaxKeyBytes+1), nil); abi.CodeOf(err) != abi.CodeTooLarge {
		t.Errorf("long key: %v", err)
	}
	if err := s.Set(ctx, "p", "main", "k", bytes.Repeat([]byte{1}, MaxValueBytes+1)); abi.CodeOf(err) != abi.CodeTooLarge {
		t.Errorf("large value: %v", err)
	}
	if _, _, err := s.Get(ctx, "p", "main", ""); abi.CodeOf(err) != abi.CodeBadRequest {
		t.Errorf("empty key: %v", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
