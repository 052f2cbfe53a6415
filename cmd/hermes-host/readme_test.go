package main

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Every configuration example in the documentation checks out: each ```yaml block of README.md,
// plugins/*/README.md and the Markdown under examples/ is run through `config check` as a whole
// configuration file, with every ${NAME} it references set to a placeholder.
//
// Marker convention: a block that is not a whole configuration (a fragment of one, or YAML that
// is not hermes-host's configuration at all) is preceded, on the line right above its fence, by
//
//	<!-- config-check: skip (why) -->
//
// and is left out. There is no other way out: a new example is checked unless its author says
// why not.
func TestDocumentedConfigurationsCheck(t *testing.T) {
	cleanEnv(t)
	files, err := filepath.Glob("../../plugins/*/README.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{"../../README.md"}, files...)
	filepath.WalkDir("../../examples", func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") && !strings.Contains(path, "node_modules") {
			files = append(files, path)
		}
		return nil
	})
	block := regexp.MustCompile("(?m)^(<!-- config-check: skip[^\n]*-->\n)?```ya?ml\n((?s:.*?))^```")
	envRef := regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)
	checked := 0
	for _, file := range files {
		text, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range block.FindAllSubmatchIndex(text, -1) {
			name := filepath.ToSlash(strings.TrimPrefix(file, "../../"))
			line := 1 + strings.Count(string(text[:m[0]]), "\n")
			if m[2] >= 0 {
				continue // marked: not a whole configuration
			}
			body := string(text[m[4]:m[5]])
			for _, ref := range envRef.FindAllStringSubmatch(body, -1) {
				t.Setenv(ref[1], "placeholder-"+strings.ToLower(ref[1]))
			}
			_, stderr, err := checkFile(t, body)
			if err != nil {
				var exit exitError
				if !errors.As(err, &exit) {
					t.Errorf("%s:%d: %v", name, line, err)
				}
				t.Errorf("%s:%d: the example does not check out (mark a fragment with <!-- config-check: skip (why) -->):\n%s", name, line, stderr)
			}
			checked++
		}
	}
	if checked < 7 {
		t.Fatalf("checked %d examples: the extraction missed the documentation's", checked)
	}
	t.Logf("checked %d examples", checked)
}
