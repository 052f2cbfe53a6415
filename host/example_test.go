package host_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/conformance/echotest"
	"github.com/hermes-host/hermes-host/host"
	"github.com/hermes-host/hermes-host/sdk/wasmbuild"
)

// A program embeds the host with an agent of its own. The echo plugin (the loopback platform
// of this repository, built from source here) talks to a fake of its platform; a message
// posted to the host's webhook is answered by the program's agent, and the answer reaches the
// platform through the host's delivery ledger.
func Example() {
	dir, err := os.MkdirTemp("", "hermes-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	echo, err := wasmbuild.Build("../plugins/echo")
	if err != nil {
		log.Fatal(err)
	}
	if err := wasmbuild.CopyFile(echo, filepath.Join(dir, "plugins", "echo.wasm")); err != nil {
		log.Fatal(err)
	}
	platform := echotest.New()
	defer platform.Close()

	// The configuration is the YAML of hermes-host serve; the program sets where it runs.
	cfg := host.Config{
		YAML: fmt.Appendf(nil, `
demo: {plugin: ""}
plugins:
  echo:
    egress_extra: ["127.0.0.1"]
    profiles:
      main: {outbox_url: %q}
    access:
      main: {allow_all: true}
`, platform.URL()+"/outbox"),
		DataDir: dir, Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:0",
		CompilationCache: os.Getenv("HERMES_COMPILATION_CACHE"), // "": the data directory's
	}
	shout := host.AgentFunc(func(ctx context.Context, t *host.Turn) (*host.Reply, error) {
		return &host.Reply{Text: strings.ToUpper(t.Text) + "!"}, nil
	})
	public := make(chan string, 1)
	h, err := host.Open(context.Background(), cfg, host.Options{
		Agent:  shout,
		Logger: slog.New(slog.DiscardHandler),
		Ready:  func(addr, _ string) { public <- addr },
	})
	if err != nil {
		log.Fatal(err)
	}
	defer h.Close()
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- h.Serve(ctx) }()
	defer func() { stop(); <-served }()

	// A user says hello on the platform, which posts it to the host's webhook (answered 503
	// while the plugin is still loading: the platform tries again).
	hook := "http://" + <-public + "/hooks/echo/main"
	for {
		resp, err := http.Post(hook, "application/json",
			strings.NewReader(`{"id":"m1","chat_id":"42","chat_type":"dm","user_id":"ada","text":"hello"}`))
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if m, ok := platform.Wait(time.Minute, echotest.Has("HELLO")); ok {
		fmt.Printf("chat %s: %s\n", m.ChatID, m.Text)
	}
	// Output: chat 42: HELLO!
}

// Inspect validates a plugin file as a serving host would load it, and describes it.
func ExampleInspect() {
	echo, err := wasmbuild.Build("../plugins/echo")
	if err != nil {
		log.Fatal(err)
	}
	info, err := host.Inspect(context.Background(), echo)
	if err != nil {
		log.Fatal(err)
	}
	m := info.Manifest
	fmt.Println(m.Name, m.Kind, "plugin for", m.Platform+":", info.State)
	fmt.Println("current ABI:", info.ABI == abi.Current().String(), "webhook:", m.Has(abi.CapWebhook))
	// Output:
	// echo platform plugin for echo: active
	// current ABI: true webhook: true
}

// LoadPlugin runs one plugin outside a serving host, against the host's real host functions:
// here the echo plugin sends a message to a fake of its platform, which its egress may reach
// because the load grants the loopback address (everything else stays denied).
func ExampleLoadPlugin() {
	echo, err := wasmbuild.Build("../plugins/echo")
	if err != nil {
		log.Fatal(err)
	}
	platform := echotest.New()
	defer platform.Close()
	env, err := host.NewEnv(host.EnvOptions{}) // kv in a temporary directory; no session services
	if err != nil {
		log.Fatal(err)
	}
	defer env.Close()
	ctx := context.Background()
	p, err := host.LoadPlugin(ctx, echo, host.PluginOptions{
		Env:      env,
		Profiles: map[string]json.RawMessage{"main": fmt.Appendf(nil, `{"outbox_url": %q}`, platform.URL()+"/outbox")},
		Egress:   host.Egress{Extra: []string{"127.0.0.1"}},
		CacheDir: os.Getenv("HERMES_COMPILATION_CACHE"),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	res, err := p.Send(ctx, "main", abi.OutboundMessage{ChatType: abi.ChatDM, ChatID: "42", Text: "hi from outside a host"})
	if err != nil || res.Error != nil {
		log.Fatal(err, res)
	}
	for _, m := range platform.Messages() {
		fmt.Printf("chat %s: %s\n", m.ChatID, m.Text)
	}
	// Output: chat 42: hi from outside a host
}

// ScanPlugins loads the plugins directory once without serving, as `hermes-host plugins ls`
// does when no host is running: what loads, and each file rejected with the reason.
func ExampleHost_ScanPlugins() {
	dir, err := os.MkdirTemp("", "hermes-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	echo, err := wasmbuild.Build("../plugins/echo")
	if err != nil {
		log.Fatal(err)
	}
	plugins := filepath.Join(dir, "plugins")
	if err := wasmbuild.CopyFile(echo, filepath.Join(plugins, "echo.wasm")); err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(plugins, "broken.wasm"), []byte("not wasm"), 0o644); err != nil {
		log.Fatal(err)
	}
	h, err := host.Open(context.Background(), host.Config{DataDir: dir, CompilationCache: os.Getenv("HERMES_COMPILATION_CACHE")},
		host.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	defer h.Close()
	loaded, rejected := h.ScanPlugins(context.Background())
	for _, p := range loaded {
		fmt.Println("loaded:", p.Name, p.State)
	}
	for _, r := range rejected {
		fmt.Println("rejected:", filepath.Base(r.Path))
	}
	// Output:
	// loaded: echo active
	// rejected: broken.wasm
}
