package store

import "testing"

// Statements built piece by piece number their placeholders in order: Args for optional
// conditions, Placeholders for an IN list after other arguments.
func TestArgsNumberPlaceholders(t *testing.T) {
	var a Args
	q := "a = " + a.Add(1) + " AND b IN (" + a.List("x", "y") + ") LIMIT " + a.Add(10)
	if want := "a = $1 AND b IN ($2, $3) LIMIT $4"; q != want || len(a) != 4 || a[3] != 10 {
		t.Fatalf("%q with %v, want %q", q, a, want)
	}
	if got := Placeholders(6, 3); got != "$6, $7, $8" {
		t.Fatalf("Placeholders(6, 3) = %q", got)
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://hermes:s3cret@db:5432/h?sslmode=disable": "postgres://hermes:xxxxx@db:5432/h?sslmode=disable",
		"mysql://u:s3cret@h/db":                              "mysql://u:xxxxx@h/db",
		"postgres://hermes@db/h":                             "postgres://hermes@db/h",
		"host=db user=hermes password=s3cret":                "host=db user=hermes password=xxxxx",
	} {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}
