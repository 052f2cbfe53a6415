package main

import (
	"bytes"
	"embed"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"text/template"

	"github.com/spf13/cobra"
)

//go:embed skeleton/*.tmpl
var skeleton embed.FS

func init() { extraCommands = append(extraCommands, newCmd) }

var pluginName = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)

// placeholder is the version required when hermes-host is taken from a local directory.
const placeholder = "v0.0.0-00010101000000-000000000000"

func newCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "new", Short: "Create new things from templates"}
	var dir, module, replace string
	plugin := &cobra.Command{
		Use:   "plugin NAME",
		Short: "Write a Go platform-plugin skeleton, with tests, that passes conformance as generated",
		Long: `Writes a Go module for a platform plugin named NAME into --dir (default ./NAME): main.go with
the handlers, main_test.go testing them natively and as Wasm through sdk/sdktest, go.mod and a
.gitignore. Build it with GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o NAME.wasm .
and check it with hermes-host conformance NAME.wasm.

Until the hermes-host module is published, point the skeleton at a local checkout with
--replace /path/to/hermes-host.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if !pluginName.MatchString(name) {
				return fmt.Errorf("plugin name %q: use 1-32 of a-z, 0-9, _ and -, starting with a letter", name)
			}
			if dir == "" {
				dir = name
			}
			if module == "" {
				module = "example.com/" + name
			}
			version := placeholder
			if bi, ok := debug.ReadBuildInfo(); ok && strings.HasPrefix(bi.Main.Version, "v") && replace == "" {
				version = bi.Main.Version
			}
			if replace != "" {
				abs, err := filepath.Abs(replace)
				if err != nil {
					return err
				}
				if _, err := os.Stat(filepath.Join(abs, "abi", "SPEC.md")); err != nil {
					return fmt.Errorf("--replace %s: not a hermes-host checkout (no abi/SPEC.md)", replace)
				}
				replace = abs
			}
			if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
				return fmt.Errorf("%s exists and is not empty", dir)
			}
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			data := map[string]string{"Name": name, "Module": module, "Version": version, "Replace": replace}
			files := map[string]string{"main.go.tmpl": "main.go", "main_test.go.tmpl": "main_test.go", "go.mod.tmpl": "go.mod"}
			for src, dst := range files {
				t, err := template.ParseFS(skeleton, "skeleton/"+src)
				if err != nil {
					return err
				}
				var b bytes.Buffer
				if err := t.Execute(&b, data); err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(dir, dst), b.Bytes(), 0o644); err != nil {
					return err
				}
			}
			if err := os.WriteFile(filepath.Join(dir, ".gitignore"), []byte("*.wasm\n"), 0o644); err != nil {
				return err
			}
			if replace != "" {
				// The checkout's checksums cover every module the skeleton needs, so go mod tidy
				// verifies them without asking the checksum database.
				if sum, err := os.ReadFile(filepath.Join(replace, "go.sum")); err == nil {
					if err := os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644); err != nil {
						return err
					}
				}
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "wrote %s (module %s)\n\n", dir, module)
			fmt.Fprintf(out, "  cd %s && go mod tidy && go test ./...\n", dir)
			fmt.Fprintf(out, "  GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o %s.wasm .\n", name)
			fmt.Fprintf(out, "  hermes-host conformance %s.wasm\n", name)
			if replace == "" && version == placeholder {
				fmt.Fprintln(out, "\nhermes-host is not published at a version this binary knows: add --replace /path/to/hermes-host")
			}
			return nil
		},
	}
	plugin.Flags().StringVar(&dir, "dir", "", "directory to write (default ./NAME; must be empty or absent)")
	plugin.Flags().StringVar(&module, "module", "", "module path (default example.com/NAME)")
	plugin.Flags().StringVar(&replace, "replace", "", "use the hermes-host checkout in this directory (a replace directive)")
	cmd.AddCommand(plugin)
	return cmd
}
