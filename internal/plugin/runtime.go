// Package plugin is the host's Wasm plugin runtime. It loads every *.wasm in a plugins
// directory through Extism (go-sdk on wazero), validates each before any traffic, keeps a
// bounded pool of instances per plugin, enforces memory, deadline and payload limits, contains
// crashes (a trapped instance is discarded; a crash loop trips a breaker that marks only that
// plugin failed), and swaps in a replaced file after in-flight calls drain.
//
// Plugins reach the world only through the host functions in Env.
package plugin

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	extism "github.com/extism/go-sdk"
	"github.com/tetratelabs/wazero"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/egress"
)

// Limits bound one plugin. Zero fields take the defaults.
type Limits struct {
	MemoryPages uint32        // per Wasm memory, 64 KiB pages; default 1024 (64 MiB)
	CallTimeout time.Duration // per export call (poll adds its wait); default 10s
	MaxInput    int           // bytes of one export's input; default 4 MiB
	MaxOutput   int           // bytes of one export's output; default 4 MiB
	PoolSize    int           // instances at most; default 4
	// A plugin that crashes BreakerCrashes times within BreakerWindow is marked failed.
	BreakerCrashes int           // default 5
	BreakerWindow  time.Duration // default 1 minute
	MaxFileBytes   int64         // .wasm file size cap; default 64 MiB
}

func (l Limits) withDefaults() Limits {
	if l.MemoryPages == 0 {
		l.MemoryPages = 1024
	}
	if l.CallTimeout <= 0 {
		l.CallTimeout = 10 * time.Second
	}
	if l.MaxInput <= 0 {
		l.MaxInput = 4 << 20
	}
	if l.MaxOutput <= 0 {
		l.MaxOutput = 4 << 20
	}
	if l.PoolSize <= 0 {
		l.PoolSize = 4
	}
	if l.BreakerCrashes <= 0 {
		l.BreakerCrashes = 5
	}
	if l.BreakerWindow <= 0 {
		l.BreakerWindow = time.Minute
	}
	if l.MaxFileBytes <= 0 {
		l.MaxFileBytes = 64 << 20
	}
	return l
}

// Settings is the operator's configuration of one plugin (by manifest name).
type Settings struct {
	Limits Limits
	// EgressNarrow, when set, allows only these of the manifest's egress hosts.
	EgressNarrow []string
	// EgressExtra grants hosts beyond the manifest's (a loopback fake, a self-hosted API).
	EgressExtra []string
	// Profiles maps each profile this plugin serves to its configuration (a JSON object).
	Profiles map[string]json.RawMessage
}

// Config configures a Runtime.
type Config struct {
	Dir      string // plugins directory: every *.wasm in it is loaded
	CacheDir string // on-disk compilation cache; empty means in-memory only
	Defaults Limits
	Plugins  map[string]Settings // by plugin name
	Other    Settings            // for plugins not named in Plugins
	Env      *Env
	Logger   *slog.Logger
	Metrics  *Metrics // nil: no metrics
}

// Runtime holds the loaded plugins.
type Runtime struct {
	cfg   Config
	log   *slog.Logger
	cache wazero.CompilationCache
	fns   []extism.HostFunction

	// mu guards plugins and files. Lock order: Runtime.mu before Plugin.mu.
	mu      sync.Mutex
	plugins map[string]*Plugin    // by manifest name
	files   map[string]*fileState // by path
	scanMu  sync.Mutex            // one Scan at a time
}

// fileState is what the runtime last saw of one file in the plugins directory.
type fileState struct {
	path   string
	sha256 string
	name   string // plugin name it provides, when loaded
	err    error  // why it was rejected, when it was
	at     time.Time
}

// New creates a runtime. Call Scan (or Watch) to load the plugins directory.
func New(cfg Config) (*Runtime, error) {
	if cfg.Env == nil {
		cfg.Env = &Env{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Env.Logger == nil {
		cfg.Env.Logger = cfg.Logger
	}
	r := &Runtime{cfg: cfg, log: cfg.Logger, plugins: map[string]*Plugin{}, files: map[string]*fileState{}}
	if cfg.CacheDir != "" {
		c, err := wazero.NewCompilationCacheWithDir(cfg.CacheDir)
		if err != nil {
			return nil, fmt.Errorf("plugin: compilation cache %s: %w", cfg.CacheDir, err)
		}
		r.cache = c
	} else {
		r.cache = wazero.NewCompilationCache()
	}
	for _, name := range abi.HostFunctions() {
		r.fns = append(r.fns, r.hostFunction(name))
	}
	return r, nil
}

// Close unloads every plugin, waiting for in-flight calls.
func (r *Runtime) Close() {
	r.mu.Lock()
	plugins := r.plugins
	r.plugins = map[string]*Plugin{}
	r.mu.Unlock()
	for _, p := range plugins {
		p.unload()
	}
	r.cache.Close(context.Background())
}

// Get returns the plugin named name, or nil.
func (r *Runtime) Get(name string) *Plugin {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.plugins[name]
}

// Plugins returns the loaded plugins sorted by name.
func (r *Runtime) Plugins() []*Plugin {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*Plugin, 0, len(r.plugins))
	for _, p := range r.plugins {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// Rejection is a file in the plugins directory that could not be loaded, and why.
type Rejection struct {
	Path  string    `json:"path"`
	Error string    `json:"error"`
	At    time.Time `json:"at"`
}

// Rejections lists files that failed validation (a failed reload of a loaded plugin included).
func (r *Runtime) Rejections() []Rejection {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Rejection
	for _, f := range r.files {
		if f.err != nil {
			out = append(out, Rejection{Path: f.path, Error: f.err.Error(), At: f.at})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// Scan brings the runtime in line with the plugins directory: new and changed files are
// validated and loaded (replacing the old version once its calls drain), removed files are
// unloaded, and a file that fails validation is recorded as rejected while any version already
// serving keeps serving. It returns the rejections of this scan.
func (r *Runtime) Scan(ctx context.Context) []Rejection {
	r.scanMu.Lock()
	defer r.scanMu.Unlock()
	paths, err := filepath.Glob(filepath.Join(r.cfg.Dir, "*.wasm"))
	if err != nil {
		r.log.Error("plugin directory scan failed", "dir", r.cfg.Dir, "error", err)
		return nil
	}
	present := map[string]bool{}
	var rejected []Rejection
	for _, path := range paths {
		present[path] = true
		data, sum, err := r.readFile(path)
		r.mu.Lock()
		prev := r.files[path]
		r.mu.Unlock()
		if err == nil && prev != nil && prev.sha256 == sum {
			continue // unchanged (loaded or already rejected with this content)
		}
		if err == nil {
			err = r.loadFile(ctx, path, data, sum)
		}
		if err != nil {
			r.mu.Lock()
			st := &fileState{path: path, sha256: sum, err: err, at: time.Now()}
			if prev != nil {
				st.name = prev.name // the old version keeps serving under its name
			}
			r.files[path] = st
			r.mu.Unlock()
			r.log.Error("plugin rejected", "file", path, "error", err)
			rejected = append(rejected, Rejection{Path: path, Error: err.Error(), At: st.at})
		}
	}
	// Unload plugins whose file is gone.
	r.mu.Lock()
	var gone []*Plugin
	for path, st := range r.files {
		if present[path] {
			continue
		}
		delete(r.files, path)
		if p := r.plugins[st.name]; p != nil && st.name != "" && p.File() == path {
			delete(r.plugins, st.name)
			gone = append(gone, p)
		}
	}
	r.mu.Unlock()
	for _, p := range gone {
		r.log.Info("plugin unloaded: file removed", "plugin", p.name)
		p.unload()
		if r.cfg.Env.Egress != nil {
			r.cfg.Env.Egress.CloseOwner(p.name)
		}
	}
	return rejected
}

func (r *Runtime) readFile(path string) ([]byte, string, error) {
	lim := r.cfg.Defaults.withDefaults().MaxFileBytes
	fi, err := os.Stat(path)
	if err != nil {
		return nil, "", err
	}
	if fi.Size() > lim {
		return nil, "", fmt.Errorf("file is %d bytes, over the %d-byte cap", fi.Size(), lim)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, "", err
	}
	h := sha256.Sum256(data)
	return data, hex.EncodeToString(h[:]), nil
}

// loadFile validates and loads one file, installing it under its manifest name.
func (r *Runtime) loadFile(ctx context.Context, path string, data []byte, sum string) error {
	start := time.Now()
	v, err := r.build(ctx, path, data, sum)
	if err != nil {
		return err
	}
	name := v.manifest.Name
	r.mu.Lock()
	p := r.plugins[name]
	if p != nil && p.File() != path {
		r.mu.Unlock()
		v.close()
		return fmt.Errorf("plugin name %q is already provided by %s", name, p.File())
	}
	if p == nil {
		p = &Plugin{name: name, rt: r}
		r.plugins[name] = p
	}
	// If this path used to provide another name, that plugin is replaced by this one.
	var renamed *Plugin
	if prev := r.files[path]; prev != nil && prev.name != "" && prev.name != name {
		renamed = r.plugins[prev.name]
		delete(r.plugins, prev.name)
	}
	r.files[path] = &fileState{path: path, sha256: sum, name: name, at: time.Now()}
	r.mu.Unlock()
	if renamed != nil {
		renamed.unload()
	}
	old := p.swap(v)
	r.log.Info("plugin loaded", "plugin", name, "version", v.manifest.Version, "file", path,
		"abi", v.abi.String(), "sha256", sum[:12], "took", time.Since(start).Round(time.Millisecond))
	if old != nil {
		go func() {
			old.drainAndClose()
			r.log.Info("previous plugin version unloaded after draining", "plugin", name, "version", old.manifest.Version)
		}()
	}
	return nil
}

// build compiles and validates one file into a ready version with one live instance.
func (r *Runtime) build(ctx context.Context, path string, data []byte, sum string) (*version, error) {
	info, err := parseModule(data)
	if err != nil {
		return nil, err
	}
	guestABI, err := checkStatic(info, abi.Current())
	if err != nil {
		return nil, err
	}
	// Limits apply at compile time, before the plugin has said its name, so they are looked up
	// by the file's base name (the convention is <name>.wasm); the rest by the real name.
	base := filepath.Base(path)
	settings := r.settings(strings.TrimSuffix(base, ".wasm"))
	limits := settings.Limits
	if limits == (Limits{}) {
		limits = r.cfg.Defaults
	}
	limits = limits.withDefaults()
	compiled, err := extism.NewCompiledPlugin(ctx,
		extism.Manifest{
			Wasm:   []extism.Wasm{extism.WasmData{Data: data, Name: "main"}},
			Memory: &extism.ManifestMemory{MaxPages: limits.MemoryPages, MaxHttpResponseBytes: 0, MaxVarBytes: 0},
		},
		extism.PluginConfig{
			EnableWasi: true,
			RuntimeConfig: wazero.NewRuntimeConfig().
				WithCompilationCache(r.cache).
				WithCloseOnContextDone(true),
		},
		r.fns)
	if err != nil {
		return nil, fmt.Errorf("compile: %w", err)
	}
	v := &version{rt: r, file: path, sha256: sum, abi: guestABI, info: info, compiled: compiled, limits: limits, loaded: time.Now()}
	v.breaker = breaker{crashes: limits.BreakerCrashes, window: limits.BreakerWindow}
	v.pool = newPool(limits.PoolSize, v.newInstance)

	// Create one instance eagerly and ask it who it is.
	out, err := v.call(ctx, Caller{Plugin: base}, abi.ExportDescribe, nil, limits.CallTimeout)
	if err != nil {
		v.close()
		return nil, fmt.Errorf("describe: %w", err)
	}
	if err := json.Unmarshal(out, &v.manifest); err != nil {
		v.close()
		return nil, fmt.Errorf("describe returned malformed JSON: %v", err)
	}
	if err := checkManifest(&v.manifest, info); err != nil {
		v.close()
		return nil, err
	}
	// Apply the operator's settings for the plugin's real name.
	v.settings = r.settings(v.manifest.Name)
	v.egress = egress.Policy{Manifest: v.manifest.Egress, Narrow: settings.EgressNarrow, Extra: settings.EgressExtra}
	v.metrics = r.cfg.Metrics.forPlugin(v.manifest.Name)
	v.metrics.instances(float64(v.pool.size())) // the eager instance, created before metrics
	if err := v.configureProfiles(ctx); err != nil {
		v.close()
		return nil, err
	}
	return v, nil
}

func (r *Runtime) settings(name string) Settings {
	if s, ok := r.cfg.Plugins[name]; ok {
		return s
	}
	return r.cfg.Other
}

// Plugin is one loaded plugin, stable across reloads: it always calls the current version.
type Plugin struct {
	name string
	rt   *Runtime

	mu  sync.RWMutex // guards cur
	cur *version

	statusMu sync.Mutex                   // guards status
	status   map[string]abi.ProfileStatus // by profile: what the last poll reported (ABI 1.1)
}

// Name is the plugin's manifest name.
func (p *Plugin) Name() string { return p.name }

// Manifest is the current version's manifest.
func (p *Plugin) Manifest() abi.Manifest { return p.current().manifest }

// PluginFor returns the name of the platform plugin that serves platform for profile.
func (r *Runtime) PluginFor(platform, profile string) (string, bool) {
	for _, p := range r.Plugins() {
		m := p.Manifest()
		if m.Kind != abi.KindPlatform || m.Platform != platform {
			continue
		}
		if slices.Contains(p.Profiles(), profile) {
			return p.Name(), true
		}
	}
	return "", false
}

// Caller is the identity the plugin acts under for profile: its name, kind and platform.
func (p *Plugin) Caller(profile string) Caller {
	m := p.Manifest()
	return Caller{Plugin: p.name, Kind: m.Kind, Platform: m.Platform, Profile: profile}
}

// Limits are the current version's effective limits.
func (p *Plugin) Limits() Limits { return p.current().limits }

// File is the path of the current version's file.
func (p *Plugin) File() string { return p.current().file }

func (p *Plugin) current() *version {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.cur
}

// acquire returns the current version with an in-flight call registered on it. The caller must
// call v.inflight.Done. Registering under the read lock means a swap (write lock) cannot slip
// between reading cur and registering, so drainAndClose never misses a call.
func (p *Plugin) acquire() *version {
	p.mu.RLock()
	defer p.mu.RUnlock()
	v := p.cur
	if v != nil {
		v.inflight.Add(1)
	}
	return v
}

func (p *Plugin) swap(v *version) (old *version) {
	p.mu.Lock()
	defer p.mu.Unlock()
	old, p.cur = p.cur, v
	return old
}

func (p *Plugin) unload() {
	if old := p.swap(nil); old != nil {
		old.drainAndClose()
	}
}

// ErrUnloaded is returned by calls to a plugin whose file was removed.
var ErrUnloaded = errors.New("plugin unloaded")

// Call calls export with a raw input for profile (empty for describe). It is the path every
// typed call takes; the input is not interpreted.
func (p *Plugin) Call(ctx context.Context, profile, export string, input []byte) ([]byte, error) {
	v := p.acquire()
	if v == nil {
		return nil, fmt.Errorf("plugin %s: %w", p.name, ErrUnloaded)
	}
	defer v.inflight.Done()
	return v.call(ctx, v.caller(profile), export, input, v.limits.CallTimeout)
}

// version is one loaded file of a plugin.
type version struct {
	rt       *Runtime
	file     string
	sha256   string
	abi      abi.Version
	info     *moduleInfo
	manifest abi.Manifest
	settings Settings
	egress   egress.Policy
	limits   Limits
	loaded   time.Time
	compiled *extism.CompiledPlugin
	pool     *pool
	breaker  breaker
	metrics  *pluginMetrics
	inflight sync.WaitGroup

	profMu   sync.RWMutex
	profiles map[string]*profileState
}

type profileState struct {
	config   json.RawMessage
	problems []string // non-empty: the profile is disabled
}

func (v *version) caller(profile string) Caller {
	return Caller{Plugin: v.manifest.Name, Kind: v.manifest.Kind, Platform: v.manifest.Platform, Profile: profile, Egress: v.egress}
}

func (v *version) newInstance(ctx context.Context) (*instance, error) {
	stderr := &headBuffer{max: 8 << 10}
	p, err := v.compiled.Instance(ctx, extism.PluginInstanceConfig{
		ModuleConfig: wazero.NewModuleConfig().
			WithStderr(stderr).
			WithSysWalltime().
			WithSysNanotime().
			WithNanosleep(sleepSlice).
			WithRandSource(rand.Reader),
	})
	if err != nil {
		return nil, fmt.Errorf("instantiate: %w", err)
	}
	v.metrics.instances(1)
	return &instance{p: p, stderr: stderr}, nil
}

// maxSleepSlice bounds one guest sleep (WASI poll_oneoff with a clock). A guest that asks for
// longer wakes up, finds its timer not yet due and sleeps again, so the call's deadline (checked
// when the guest runs) still stops a guest that sleeps past it.
const maxSleepSlice = 20 * time.Millisecond

// sleepSlice really sleeps, unlike wazero's default (which returns at once, so that a guest's
// time.Sleep spins a core until the time has passed), but at most maxSleepSlice at a time.
func sleepSlice(ns int64) { time.Sleep(min(time.Duration(ns), maxSleepSlice)) }

func (v *version) discard(inst *instance) {
	v.pool.discard(inst)
	v.metrics.instances(-1)
}

func (v *version) drainAndClose() {
	v.inflight.Wait()
	v.close()
}

func (v *version) close() {
	n := v.pool.size()
	v.pool.close()
	v.metrics.instances(-float64(n))
	v.compiled.Close(context.Background())
}

// callKey carries the call in progress to host functions through the context.
type callKey struct{}

type callState struct {
	caller   Caller
	panicked error // a host function panicked under this call: discard the instance
}

// CrashError reports that a plugin instance died (trapped, ran past its deadline, or ran out of
// memory). The instance was discarded.
type CrashError struct {
	Plugin string
	Export string
	Reason string // "deadline", "trap"
	Err    error
	Stderr string // the guest's last words, if any
}

func (e *CrashError) Error() string {
	msg := fmt.Sprintf("plugin %s crashed in %s (%s): %v", e.Plugin, e.Export, e.Reason, e.Err)
	if s := strings.TrimSpace(e.Stderr); s != "" {
		msg += "; guest stderr: " + s
	}
	return msg
}

func (e *CrashError) Unwrap() error { return e.Err }

// FailedError is returned by calls to a plugin whose breaker tripped.
type FailedError struct {
	Plugin string
	Last   error
}

func (e *FailedError) Error() string {
	return fmt.Sprintf("plugin %s is failed after repeated crashes (last: %v)", e.Plugin, e.Last)
}

func (v *version) call(ctx context.Context, c Caller, export string, input []byte, timeout time.Duration) ([]byte, error) {
	start := time.Now()
	if err := v.breaker.check(c.Plugin); err != nil {
		v.metrics.call(export, "failed", start)
		return nil, err
	}
	if len(input) > v.limits.MaxInput {
		v.metrics.call(export, "too_large", start)
		return nil, abi.Errorf(abi.CodeTooLarge, "%s input of %d bytes exceeds the cap of %d", export, len(input), v.limits.MaxInput)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	inst, err := v.pool.get(ctx)
	if err != nil {
		v.metrics.call(export, "no_instance", start)
		return nil, fmt.Errorf("plugin %s: no instance available: %w", c.Plugin, err)
	}
	st := &callState{caller: c}
	rc, out, err := inst.p.CallWithContext(context.WithValue(ctx, callKey{}, st), export, input)

	if err != nil && !isGuestError(inst, err) {
		// The instance is dead or its state is suspect: never reuse it.
		v.discard(inst)
		reason := "trap"
		if ctx.Err() != nil {
			reason = "deadline"
			err = fmt.Errorf("call deadline of %v exceeded; instance stopped: %w", timeout, err)
		}
		crash := &CrashError{Plugin: c.Plugin, Export: export, Reason: reason, Err: err, Stderr: inst.stderr.take()}
		v.metrics.crash(reason)
		v.metrics.call(export, "crash", start)
		if v.breaker.record(crash) {
			v.rt.log.Error("plugin failed: crash breaker tripped", "plugin", c.Plugin, "error", crash)
		} else {
			v.rt.log.Warn("plugin instance crashed and was discarded", "plugin", c.Plugin, "export", export, "error", crash)
		}
		return nil, crash
	}
	inst.stderr.take()
	if st.panicked != nil {
		v.discard(inst)
	} else {
		v.pool.put(inst)
	}
	if err != nil {
		v.metrics.call(export, "error", start)
		return nil, abi.ParseError(err.Error())
	}
	if rc != 0 {
		v.metrics.call(export, "error", start)
		return nil, abi.Errorf(abi.CodeInternal, "%s returned %d without an error message", export, rc)
	}
	if len(out) > v.limits.MaxOutput {
		v.metrics.call(export, "too_large", start)
		return nil, abi.Errorf(abi.CodeTooLarge, "%s output of %d bytes exceeds the cap of %d", export, len(out), v.limits.MaxOutput)
	}
	v.metrics.call(export, "ok", start)
	return out, nil
}

// isGuestError reports whether err is the guest's own error_set message (the instance is
// healthy) rather than a trap or a closed module.
func isGuestError(inst *instance, err error) bool {
	msg := inst.p.GetError()
	return msg != "" && msg == err.Error()
}

// breaker counts crashes in a sliding window.
type breaker struct {
	crashes int
	window  time.Duration

	mu     sync.Mutex
	times  []time.Time
	failed *FailedError
}

func (b *breaker) check(plugin string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failed != nil {
		return b.failed
	}
	return nil
}

// record notes a crash and reports whether it tripped the breaker.
func (b *breaker) record(err *CrashError) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	keep := b.times[:0]
	for _, t := range b.times {
		if now.Sub(t) < b.window {
			keep = append(keep, t)
		}
	}
	b.times = append(keep, now)
	if len(b.times) >= b.crashes && b.failed == nil {
		b.failed = &FailedError{Plugin: err.Plugin, Last: err}
		return true
	}
	return false
}

func (b *breaker) state() (string, string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failed != nil {
		return "failed", b.failed.Last.Error()
	}
	return "active", ""
}
