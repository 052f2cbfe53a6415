package kv

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/store/storetest"
)

func TestNamespacesAreSeparateAndDurable(t *testing.T) {
	ctx := context.Background()
	b := storetest.Default(t)
	db := b.Open(t)
	s, err := Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	must(t, s.Set(ctx, "telegram", "main", "offset", []byte("41")))
	must(t, s.Set(ctx, "telegram", "work", "offset", []byte("7")))
	must(t, s.Set(ctx, "telegram", "main", "offset", []byte("42")))
	db.Close()

	s, err = Open(ctx, b.Open(t))
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
	s, err := Open(ctx, storetest.Default(t).Open(t))
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

// The store suite: put, get, overwrite, an empty value and the namespace cap, on both backends.
func TestStoreSuite(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := context.Background()
		s, err := Open(ctx, b.Open(t))
		if err != nil {
			t.Fatal(err)
		}
		value := []byte{0, 1, 0xff, 'x'}
		must(t, s.Set(ctx, "p", "main", "k", value))
		if v, found, err := s.Get(ctx, "p", "main", "k"); err != nil || !found || !bytes.Equal(v, value) {
			t.Fatalf("get: %x %v %v", v, found, err)
		}
		must(t, s.Set(ctx, "p", "main", "k", []byte("second")))
		if v, _, _ := s.Get(ctx, "p", "main", "k"); string(v) != "second" {
			t.Fatalf("overwritten value %q", v)
		}
		must(t, s.Set(ctx, "p", "main", "empty", nil))
		if v, found, err := s.Get(ctx, "p", "main", "empty"); err != nil || !found || len(v) != 0 {
			t.Fatalf("empty value: %q %v %v", v, found, err)
		}
		if v, found, err := s.Get(ctx, "p", "other", "k"); err != nil || found {
			t.Fatalf("other profile sees %q (%v, %v)", v, found, err)
		}
		// The cap counts keys, so overwriting a key in a full namespace still works.
		db := b.Open(t)
		_, err = db.ExecContext(ctx, `INSERT INTO plugin_kv (plugin, profile, key, value, updated_at)
			SELECT 'full', 'main', 'k' || n, '', 0 FROM (`+series(MaxKeys)+`) AS s`)
		must(t, err)
		if err := s.Set(ctx, "full", "main", "new", nil); abi.CodeOf(err) != abi.CodeTooLarge {
			t.Fatalf("set into a full namespace: %v", err)
		}
		must(t, s.Set(ctx, "full", "main", "k1", []byte("v")))
	})
}

// series is a query of the integers 1..n named n, in SQL both backends accept.
func series(n int) string {
	return `WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < ` + strconv.Itoa(n) + `) SELECT n FROM c`
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
