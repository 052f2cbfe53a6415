package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/abi/schema"
	"github.com/hermes-host/hermes-host/host"
)

func init() { extraCommands = append(extraCommands, callCmd) }

// callCmd runs one export of a plugin file against the host's real host functions, like
// `extism call`: the plugin author's way to try a request without running a gateway.
func callCmd(g *globals) *cobra.Command {
	var profile, configFile, inputFile, bodyFile, stateDir string
	var allow []string
	cmd := &cobra.Command{
		Use:   "call FILE.wasm EXPORT",
		Short: "Run one export of a plugin against the real host functions and print its result",
		Long: `Loads FILE.wasm as serve would and calls EXPORT (describe, configure, webhook, poll, send,
tick or jobs) once. The request is read from --input (a JSON file, or - for stdin; default {}):
the export's request message of abi/SPEC.md without "profile" and "config", which come from
--profile and --config (the profile's configuration, a JSON object). A webhook request's "body"
is base64 in the ABI; --body FILE gives it as the raw bytes instead (a platform's JSON update, as
the platform would post it), and a "body" in --input that is a JSON object or array is taken as
that JSON text, so neither needs encoding by hand.

The export's result is printed on stdout and checked against the ABI's schema: a result that is
not valid (a status outside 100-599, an event without a kind, not JSON) exits 1 with the reason.
The plugin's own log lines (hermes_log) go to stderr at --log-level (default info). Host
functions are the real ones: egress is limited to the manifest's hosts plus --allow-host, kv
state lives in --state (default: a temporary directory), events the plugin dispatches with
hermes_dispatch are printed on stderr, and the session and send host functions answer
"unavailable".

  hermes-host call mychat.wasm configure --config cfg.json
  hermes-host call mychat.wasm webhook --config cfg.json --body update.json
  echo '{"chat_id": "42", "text": "hi"}' | hermes-host call mychat.wasm send --config cfg.json --input -`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			file, export := args[0], args[1]
			req := map[string]json.RawMessage{}
			if inputFile != "" {
				b, err := readInput(cmd.InOrStdin(), inputFile)
				if err != nil {
					return err
				}
				if err := json.Unmarshal(b, &req); err != nil {
					return fmt.Errorf("--input: not a JSON object: %v", err)
				}
			}
			var config json.RawMessage = []byte(`{}`)
			if configFile != "" {
				b, err := readInput(cmd.InOrStdin(), configFile)
				if err != nil {
					return err
				}
				if !json.Valid(b) {
					return fmt.Errorf("--config: %s is not JSON", configFile)
				}
				config = b
			}
			if b := req["body"]; export == abi.ExportWebhook && len(b) > 0 && (b[0] == '{' || b[0] == '[') {
				req["body"], _ = json.Marshal([]byte(b)) // the JSON text, base64 as the ABI carries it
			}
			if bodyFile != "" {
				if export != abi.ExportWebhook {
					return fmt.Errorf("--body is the body of a webhook request; %s takes none", export)
				}
				b, err := readInput(cmd.InOrStdin(), bodyFile)
				if err != nil {
					return err
				}
				req["body"], _ = json.Marshal(b)
				if req["method"] == nil {
					req["method"] = json.RawMessage(`"POST"`)
				}
			}
			if export != abi.ExportDescribe {
				req["profile"], _ = json.Marshal(profile)
				req["config"] = config
			}
			in, _ := json.Marshal(req)

			if stateDir == "" {
				dir, err := os.MkdirTemp("", "hermes-call-")
				if err != nil {
					return err
				}
				defer os.RemoveAll(dir)
				stateDir = dir
			}
			state, err := host.OpenState(stateDir)
			if err != nil {
				return err
			}
			defer state.Close()
			level := slog.LevelInfo
			if g.logLevel != "" {
				if err := level.UnmarshalText([]byte(g.logLevel)); err != nil {
					return fmt.Errorf("--log-level %q: %v", g.logLevel, err)
				}
			}
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level}))
			env, err := host.NewEnv(host.EnvOptions{State: state, Logger: log, Dispatcher: printDispatcher{cmd.ErrOrStderr()}})
			if err != nil {
				return err
			}
			defer env.Close()
			p, err := host.LoadPlugin(cmd.Context(), file, host.PluginOptions{Env: env, Egress: host.Egress{Extra: allow},
				Profiles: map[string]json.RawMessage{profile: config}})
			if err != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "%s: rejected: %v\n", file, err)
				return exitError{1}
			}
			defer p.Close()
			out, err := p.Call(cmd.Context(), profile, export, in)
			if err != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "%s %s: %v\n", file, export, err)
				return exitError{1}
			}
			invalid := schema.Validate(schema.ResultOf(export), out)
			var pretty any
			if json.Unmarshal(out, &pretty) == nil {
				out, _ = json.MarshalIndent(pretty, "", "  ")
			}
			fmt.Fprintln(cmd.OutOrStdout(), string(out))
			if invalid != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "%s %s: the result is %v\n", file, export, invalid)
				return exitError{1}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&profile, "profile", "main", "the profile the call is for")
	f.StringVar(&configFile, "config", "", "JSON file with the profile's configuration (default {})")
	f.StringVar(&inputFile, "input", "", "JSON file with the export's request, or - for stdin (default {})")
	f.StringVar(&bodyFile, "body", "", "webhook: file with the request's body as the platform posts it (raw, not base64), or - for stdin")
	f.StringVar(&stateDir, "state", "", "directory that keeps the plugin's kv state between calls")
	f.StringSliceVar(&allow, "allow-host", nil, "egress host pattern granted beyond the manifest's (repeatable)")
	return cmd
}

func readInput(stdin io.Reader, name string) ([]byte, error) {
	if name == "-" {
		return io.ReadAll(stdin)
	}
	return os.ReadFile(name)
}

// printDispatcher prints the events a plugin dispatches, one JSON line each.
type printDispatcher struct{ w io.Writer }

func (d printDispatcher) Dispatch(_ context.Context, c host.Caller, ev abi.InboundEvent) (abi.DispatchReply, error) {
	b, _ := json.Marshal(ev)
	fmt.Fprintf(d.w, "dispatched: %s\n", strings.TrimSpace(string(b)))
	return abi.DispatchReply{Session: abi.SessionRef{}}, nil
}
