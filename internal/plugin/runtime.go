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
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	extism "github.com/extism/go-sdk"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/sys"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/egress"
)

// Limits bound one plugin. Zero fields take the defaults.
type Limits struct {
	MemoryPages uint32        // per Wasm memory, 64 KiB pages; default 1024 (64 MiB)
	CallTimeout time.Duration // per export call (poll adds its wait); default 10s
	MaxInput    int           // bytes of one export's input; default 4 MiB
	MaxOutput   int           // bytes of one export's output; default 4 MiB
	PoolSize    int           // instances for send, tick and configure at most; default 4
	// InboundPoolSize is how many more instances serve webhook and poll calls, which the
	// others can never use up; default 2. A plugin uses at most PoolSize+InboundPoolSize.
	InboundPoolSize int
	// KeepMemoryPages: an instance whose memories have grown past this many pages in all is
	// discarded after its call instead of kept idle. Default a quarter of MemoryPages.
	KeepMemoryPages uint32
	// IdleTimeout: instances idle for longer are closed, except the most recently used one.
	// Default 1 minute.
	IdleTimeout time.Duration
	// ColdTimeout: when no call but ticks has run for this long, the plugin is cold: its
	// last instances are closed too, an instance a tick used is closed after it, and the next
	// call starts one (a few milliseconds; RATIONALE.md, "An idle host"). Default 5 minutes;
	// it is never shorter than IdleTimeout.
	ColdTimeout time.Duration
	// A plugin that crashes BreakerCrashes times within BreakerWindow is marked failed.
	BreakerCrashes int           // default 5
	BreakerWindow  time.Duration // default 1 minute
	MaxFileBytes   int64         // .wasm file size cap; default 64 MiB
	// LoadTimeout bounds loading one file: compiling it, describe and every profile's configure
	// (each configure also has its own CallTimeout). Describe runs under LoadTimeout alone: it
	// is the first call of the first instance, so it also starts the guest's runtime, which on
	// a loaded machine has taken longer than 30 s. Every later instance starts the same way, a
	// describe under LoadTimeout before the call that needed it (version.start). Default 2
	// minutes.
	LoadTimeout time.Duration
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
	if l.InboundPoolSize <= 0 {
		l.InboundPoolSize = 2
	}
	if l.KeepMemoryPages == 0 {
		l.KeepMemoryPages = l.MemoryPages / 4
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = time.Minute
	}
	if l.ColdTimeout <= 0 {
		l.ColdTimeout = 5 * time.Minute
	}
	l.ColdTimeout = max(l.ColdTimeout, l.IdleTimeout)
	if l.BreakerCrashes <= 0 {
		l.BreakerCrashes = 5
	}
	if l.BreakerWindow <= 0 {
		l.BreakerWindow = time.Minute
	}
	if l.MaxFileBytes <= 0 {
		l.MaxFileBytes = 64 << 20
	}
	if l.LoadTimeout <= 0 {
		l.LoadTimeout = 2 * time.Minute
	}
	return l
}

// Settings is the operator's configuration of one plugin (by manifest name).
type Settings struct {
	Limits Limits
	// EgressNarrow, when set, allows only these of the manifest's egress hosts.
	EgressNarrow []string
	// EgressExtra grants hosts beyond the manifest's (a loopback fake, a self-hosted API), and
	// the internal addresses they name.
	EgressExtra []string
	// EgressAlias maps an address (host:port) to the declared host it stands in for (a
	// self-hosted Bot API server, a loopback fake); the host's scopes apply to it.
	EgressAlias map[string]string
	// EgressInternal grants internal addresses (IPs, prefixes, host names) that declared hosts
	// may resolve to; without it, loopback, private and link-local addresses are refused.
	EgressInternal []string
	// Profiles maps each profile this plugin serves to its configuration (a JSON object).
	Profiles map[string]json.RawMessage
}

// Config configures a Runtime.
type Config struct {
	Dir string // plugins directory: every *.wasm in it is loaded
	// CacheDir is the on-disk compilation cache (a directory per plugin file, pruned: see
	// CacheKeep); empty means in-memory only.
	CacheDir string
	Defaults Limits
	Plugins  map[string]Settings // by plugin name
	Other    Settings            // for plugins not named in Plugins
	Env      *Env
	Logger   *slog.Logger
	Metrics  *Metrics // nil: no metrics
	// LoadParallel bounds how many files load at once (default 8); compiling, the CPU-heavy
	// part, is further bounded by GOMAXPROCS. A file that spins in describe or configure holds
	// one load slot until its deadline, never the others.
	LoadParallel int
	// OnChange, if set, is called after a plugin is installed, replaced or unloaded, so the
	// caller can start or stop what depends on it (poll loops) without waiting for the rest
	// of a scan.
	OnChange func()
	// StrictEgress refuses a plugin that can reach a chat platform's API from every export
	// (unscoped egress): only its send, through the host's guarded path, should post messages.
	// Without it such a plugin loads with a warning.
	StrictEgress bool
	// ScaleProcs lets the runtime raise GOMAXPROCS to the number of CPUs plus the instance
	// slots of the loaded plugins (see RATIONALE.md, "A spinning guest holds a P").
	ScaleProcs bool
	// CountKernelCalls counts the calls into Extism's kernel (Runtime.KernelCalls), for
	// benchmarks: each call then also runs a wazero function listener.
	CountKernelCalls bool
}

// Runtime holds the loaded plugins.
type Runtime struct {
	cfg    Config
	log    *slog.Logger
	cache  wazero.CompilationCache
	fns    []extism.HostFunction
	kernel *kernelCounter // nil unless Config.CountKernelCalls

	// mu guards plugins, files, loading and owners. Lock order: Runtime.mu before Plugin.mu.
	stop chan struct{} // closed by Close: stops the idle trimmer

	// settingsMu guards cfg.Plugins, which SetSettings replaces (never changes in place).
	settingsMu sync.Mutex

	mu      sync.Mutex
	plugins map[string]*Plugin    // by manifest name
	files   map[string]*fileState // by path
	loading map[string]string     // path → sha256 of the content being loaded
	owners  map[string]string     // platform → the name of the one platform plugin that owns it
	// scanMu makes one Scan at a time compare the directory with files; the loads a scan starts
	// run outside it, so a rescan (a hot reload) never waits behind a slow load.
	scanMu      sync.Mutex
	seen        map[string]seenFile // by path: what a scan last read; guarded by scanMu
	loadSlots   chan struct{}       // bounds concurrent loads
	compileSlot chan struct{}       // bounds concurrent compilations

	reclaimWanted atomic.Bool // a reclaim is asked for and has not started; see reclaim
	reclaimMu     sync.Mutex  // serializes reclaims; guards reclaimed
	reclaimed     time.Time   // when the last reclaim started
}

// reclaimEvery spaces the returns of memory to the system that traps ask for.
const reclaimEvery = 2 * time.Second

// reclaim gives the memory a trapped call left in the host's heap back to the system, in the
// background, at most once per reclaimEvery but always after the last trap: a trap during the
// pause after one reclaim gets the next. A guest's call stack lives in the host's heap, not in
// its linear memory (wazero grows it up to its ceiling, tens of MiB: a guest that recurses
// without end), and once the call trapped it is garbage that the Go runtime would otherwise keep
// resident, for reuse, long after (measured: +53 to +68 MiB after five overflows, for good).
// Traps are rare (each one is a crash, and the breaker stops a plugin that repeats them), so a
// forced collection after one costs little. A scan that loaded or unloaded files asks for one
// too: wazero decodes and validates every function of a file on each load, cached or not, and
// after the seven first-party plugins loaded, 186 MiB of the heap was such garbage (resident
// 415 MiB before the reclaim, 234 MiB after, measured once; TestLoadGivesMemoryBack checks it for
// one cold load).
func (r *Runtime) reclaim() {
	if r.reclaimWanted.Swap(true) {
		return // one is waiting to start; it covers this trap too
	}
	go func() {
		r.reclaimMu.Lock()
		defer r.reclaimMu.Unlock()
		if wait := time.Until(r.reclaimed.Add(reclaimEvery)); wait > 0 {
			time.Sleep(wait)
		}
		r.reclaimWanted.Store(false) // a trap from now on asks for another
		r.reclaimed = time.Now()
		debug.FreeOSMemory()
	}()
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
	if cfg.LoadParallel <= 0 {
		cfg.LoadParallel = 8
	}
	r := &Runtime{cfg: cfg, log: cfg.Logger, plugins: map[string]*Plugin{}, files: map[string]*fileState{},
		loading: map[string]string{}, owners: map[string]string{}, seen: map[string]seenFile{}, stop: make(chan struct{}),
		loadSlots:   make(chan struct{}, cfg.LoadParallel),
		compileSlot: make(chan struct{}, runtime.GOMAXPROCS(0))}
	if cfg.CountKernelCalls {
		r.kernel = &kernelCounter{}
	}
	if cfg.CacheDir != "" {
		// Each file's code goes in a directory of its own (moduleCache); this one must exist.
		if err := os.MkdirAll(cfg.CacheDir, 0o700); err != nil {
			return nil, fmt.Errorf("plugin: compilation cache %s: %w", cfg.CacheDir, err)
		}
	}
	r.cache = wazero.NewCompilationCache() // in memory: used when there is no CacheDir
	for _, name := range abi.HostFunctions() {
		r.fns = append(r.fns, r.hostFunction(name))
	}
	prev := cfg.Env.Denied
	cfg.Env.Denied = func(c Caller, fn string, err error) {
		r.noteDenied(c, fn, err)
		if prev != nil {
			prev(c, fn, err)
		}
	}
	go r.trimIdle()
	return r, nil
}

// noteDenied counts and logs an egress call the policy refused.
func (r *Runtime) noteDenied(c Caller, fn string, err error) {
	r.log.Warn("plugin egress refused", "plugin", c.Plugin, "profile", c.Profile, "export", c.Export, "fn", fn, "error", err)
	if p := r.Get(c.Plugin); p != nil {
		if v := p.current(); v != nil {
			v.denied.Add(1)
			v.lastDenied.Store(err.Error())
			v.metrics.denied(c.Export)
		}
	}
}

// trimIdle closes instances idle for longer than their plugin's IdleTimeout (keeping one per
// plugin, so the next call is warm) and, once a plugin is cold (no call but ticks for its
// ColdTimeout), the one kept too, until Close.
func (r *Runtime) trimIdle() {
	every := time.Minute
	for _, s := range append([]Settings{{Limits: r.cfg.Defaults}, r.cfg.Other}, mapValues(r.allSettings())...) {
		l := s.Limits
		if l == (Limits{}) {
			l = r.cfg.Defaults
		}
		every = min(every, max(l.withDefaults().IdleTimeout/2, 10*time.Millisecond))
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case now := <-t.C:
			closed := false
			for _, p := range r.Plugins() {
				if v := p.acquire(); v != nil {
					if n := v.pool.trim(now.Add(-v.limits.IdleTimeout), 1); n > 0 {
						v.metrics.instances(-float64(n))
						closed = true
					}
					v.inflight.Done()
				}
			}
			if closed {
				r.reclaim() // what the closed instances held in the Go heap goes back too
			}
		}
	}
}

func mapValues[K comparable, V any](m map[K]V) []V {
	out := make([]V, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// scaleProcs gives the Go scheduler one P per instance slot of every loaded plugin, on top of
// the CPUs. Guest code gives its P back only at the points where it checks its deadline, every
// few milliseconds at best; with as many Ps as CPUs, a few spinning guests leave the host's own
// goroutines (the listener, SQLite, a webhook's handler) queued behind them. With a P each,
// guests compete for CPU through the operating system's scheduler, which time-slices threads
// finely, and host goroutines always find a P.
func (r *Runtime) scaleProcs() {
	want := runtime.NumCPU()
	for _, p := range r.Plugins() {
		if v := p.current(); v != nil {
			want += v.limits.PoolSize + v.limits.InboundPoolSize
		}
	}
	want = min(want, 256)
	if runtime.GOMAXPROCS(0) < want {
		runtime.GOMAXPROCS(want)
	}
}

// maxMemoryPages is the largest per-memory cap any plugin may have: the runtime-wide limit
// wazero enforces. Each instance's allocator enforces its own plugin's cap below it.
func (r *Runtime) maxMemoryPages() uint32 {
	pages := r.cfg.Defaults.withDefaults().MemoryPages
	for _, s := range append([]Settings{r.cfg.Other}, mapValues(r.allSettings())...) {
		if s.Limits.MemoryPages > pages {
			pages = s.Limits.MemoryPages
		}
	}
	return pages
}

// Close unloads every plugin, waiting for in-flight calls.
func (r *Runtime) Close() {
	select {
	case <-r.stop:
	default:
		close(r.stop)
	}
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

// Loading lists the files being loaded right now.
func (r *Runtime) Loading() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.loading))
	for path := range r.loading {
		out = append(out, path)
	}
	sort.Strings(out)
	return out
}

// Scan brings the runtime in line with the plugins directory: new and changed files are
// validated and loaded (replacing the old version once its calls drain), removed files are
// unloaded, and a file that fails validation is recorded as rejected while any version already
// serving keeps serving. Files load in parallel (bounded by Config.LoadParallel), each under its
// own deadline (Limits.LoadTimeout), so one slow or spinning file delays no other. A file whose
// same content is already being loaded by another scan is skipped. Scan returns when the loads
// it started have finished, with the rejections among them.
func (r *Runtime) Scan(ctx context.Context) []Rejection {
	type job struct {
		path, sum string
		data      []byte
		err       error
	}
	r.scanMu.Lock()
	paths, err := filepath.Glob(filepath.Join(r.cfg.Dir, "*.wasm"))
	if err != nil {
		r.scanMu.Unlock()
		r.log.Error("plugin directory scan failed", "dir", r.cfg.Dir, "error", err)
		return nil
	}
	present := map[string]bool{}
	var toRead []string
	for _, path := range paths {
		present[path] = true
		if sum, ok := r.knownSum(path); ok {
			r.mu.Lock()
			unchanged := r.unchangedLocked(path, sum)
			r.mu.Unlock()
			if unchanged {
				continue // not read again: see knownSum
			}
		}
		toRead = append(toRead, path)
	}
	var jobs []*job
	for i, f := range r.readFiles(toRead) {
		path, data, sum, err := toRead[i], f.data, f.seen.sum, f.err
		if err == nil {
			r.seen[path] = f.seen
		}
		r.mu.Lock()
		unchanged := err == nil && r.unchangedLocked(path, sum)
		if !unchanged {
			r.loading[path] = sum
		}
		r.mu.Unlock()
		if unchanged {
			continue // loaded, rejected or being loaded with this content
		}
		jobs = append(jobs, &job{path: path, sum: sum, data: data, err: err})
	}
	gone := r.forgetRemoved(present)
	for path := range r.seen {
		if !present[path] {
			delete(r.seen, path)
		}
	}
	r.scanMu.Unlock()

	for _, p := range gone {
		r.log.Info("plugin unloaded: file removed", "plugin", p.name)
		p.unload()
		if r.cfg.Env.Egress != nil {
			r.cfg.Env.Egress.CloseOwner(p.name)
		}
	}
	if len(gone) > 0 {
		r.changed()
	}

	var wg sync.WaitGroup
	for _, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if j.err == nil {
				select {
				case r.loadSlots <- struct{}{}:
					j.err = r.loadFile(ctx, j.path, j.data, j.sum)
					<-r.loadSlots
				case <-ctx.Done():
					j.err = fmt.Errorf("not loaded: %w", ctx.Err())
				}
			}
			r.finishLoad(j.path, j.sum, j.err)
		}()
	}
	wg.Wait()
	r.scanMu.Lock()
	keep := map[string]bool{}
	for _, f := range r.seen {
		keep[f.sum] = true
	}
	r.scanMu.Unlock()
	r.pruneCache(keep, time.Now())
	if len(jobs) > 0 || len(gone) > 0 {
		// Decoding, validating and compiling a file leaves tens of MiB of garbage per plugin
		// in the heap, which the Go runtime would keep resident for reuse (see reclaim).
		r.reclaim()
	}
	var rejected []Rejection
	for _, j := range jobs {
		if j.err != nil {
			rejected = append(rejected, Rejection{Path: j.path, Error: j.err.Error(), At: time.Now()})
		}
	}
	return rejected
}

// finishLoad records the outcome of loading path: a rejection (the old version, if any, keeps
// serving under its name), or nothing more (loadFile recorded the success).
func (r *Runtime) finishLoad(path, sum string, err error) {
	r.mu.Lock()
	if r.loading[path] == sum {
		delete(r.loading, path)
	}
	if err != nil {
		st := &fileState{path: path, sha256: sum, err: err, at: time.Now()}
		if prev := r.files[path]; prev != nil {
			st.name = prev.name
		}
		r.files[path] = st
	}
	r.mu.Unlock()
	if err != nil {
		r.log.Error("plugin rejected", "file", path, "error", err)
	}
}

// forgetRemoved drops the state of files no longer present and returns the plugins they
// provided, for unloading.
func (r *Runtime) forgetRemoved(present map[string]bool) []*Plugin {
	r.mu.Lock()
	defer r.mu.Unlock()
	var gone []*Plugin
	for path, st := range r.files {
		if present[path] {
			continue
		}
		delete(r.files, path)
		if p := r.plugins[st.name]; p != nil && st.name != "" && p.File() == path {
			delete(r.plugins, st.name)
			r.disownLocked(st.name)
			gone = append(gone, p)
		}
	}
	return gone
}

func (r *Runtime) changed() {
	if r.cfg.ScaleProcs {
		r.scaleProcs()
	}
	if r.cfg.OnChange != nil {
		r.cfg.OnChange()
	}
}

// unchangedLocked reports whether path with content sum is loaded, rejected or being loaded
// already. r.mu is held.
func (r *Runtime) unchangedLocked(path, sum string) bool {
	prev := r.files[path]
	return (prev != nil && prev.sha256 == sum) || r.loading[path] == sum
}

// seenFile is what a scan last read of a file: its metadata before the read, when that was
// taken, and the content's hash.
type seenFile struct {
	stat os.FileInfo
	at   time.Time
	sum  string
}

// knownSum returns the hash of path's content without reading it, when the file is the one the
// last read saw: same file (device and inode), size and modification time. The periodic rescan
// would otherwise read and hash every plugin file every few seconds (tens of MiB of garbage
// and of hashing each time: an idle host's resident memory grew by 40 MiB in 10 s). A write in
// the same timestamp tick as that read would leave the metadata unchanged, so the metadata is
// trusted only for a file that was already a second old when it was read (git's rule for
// "racy" index entries); a newer one is read again.
func (r *Runtime) knownSum(path string) (string, bool) {
	s, ok := r.seen[path]
	if !ok {
		return "", false
	}
	fi, err := os.Stat(path)
	if err != nil || !os.SameFile(s.stat, fi) || s.stat.Size() != fi.Size() || !s.stat.ModTime().Equal(fi.ModTime()) {
		return "", false
	}
	return s.sum, s.at.Sub(fi.ModTime()) > time.Second
}

// fileReads counts the plugin files read (the tests of knownSum read it).
var fileReads atomic.Int64

// fileRead is one file's content and what knownSum needs to know of it.
type fileRead struct {
	data []byte
	seen seenFile
	err  error
}

// readFiles reads and hashes the files at paths, several at a time (hashing a Go plugin
// takes several milliseconds, and serve reads every file before it starts to load them).
func (r *Runtime) readFiles(paths []string) []fileRead {
	out := make([]fileRead, len(paths))
	var wg sync.WaitGroup
	slots := make(chan struct{}, runtime.GOMAXPROCS(0))
	for i, path := range paths {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer func() { <-slots; wg.Done() }()
			out[i] = r.readFile(path)
		}()
	}
	wg.Wait()
	return out
}

// readFile reads path and hashes it; the caller notes what it saw for knownSum.
func (r *Runtime) readFile(path string) fileRead {
	lim := r.cfg.Defaults.withDefaults().MaxFileBytes
	at := time.Now()
	fi, err := os.Stat(path)
	if err != nil {
		return fileRead{err: err}
	}
	if fi.Size() > lim {
		return fileRead{err: fmt.Errorf("file is %d bytes, over the %d-byte cap", fi.Size(), lim)}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return fileRead{err: err}
	}
	fileReads.Add(1)
	h := sha256.Sum256(data)
	return fileRead{data: data, seen: seenFile{stat: fi, at: at, sum: hex.EncodeToString(h[:])}}
}

// loadFile validates and loads one file, installing it under its manifest name.
func (r *Runtime) loadFile(ctx context.Context, path string, data []byte, sum string) error {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Defaults.withDefaults().LoadTimeout)
	defer cancel()
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
	platform := ""
	if v.manifest.Kind == abi.KindPlatform {
		platform = v.manifest.Platform
		if owner := r.owners[platform]; owner != "" && owner != name && owner != r.files[path].nameOrEmpty() {
			file := ""
			if o := r.plugins[owner]; o != nil {
				file = " (" + o.File() + ")"
			}
			r.mu.Unlock()
			v.close()
			return fmt.Errorf("platform %q is already owned by plugin %s%s: a platform has exactly one plugin", platform, owner, file)
		}
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
		r.disownLocked(prev.name)
	}
	r.disownLocked(name) // a new version may serve another platform than the old one
	if platform != "" {
		r.owners[platform] = name
	}
	r.files[path] = &fileState{path: path, sha256: sum, name: name, at: time.Now()}
	r.mu.Unlock()
	if renamed != nil {
		renamed.unload()
	}
	old := p.swap(v)
	r.changed()
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

// disownLocked releases the platforms plugin name owns. r.mu must be held.
func (r *Runtime) disownLocked(name string) {
	for platform, owner := range r.owners {
		if owner == name {
			delete(r.owners, platform)
		}
	}
}

func (f *fileState) nameOrEmpty() string {
	if f == nil {
		return ""
	}
	return f.name
}

// MaxManifestBytes bounds the manifest describe returns: it is kept in memory and sent with
// every plugin listing (/api/plugins, plugins ls); the largest first-party manifest (slack's)
// is about 2 KiB.
const MaxManifestBytes = 64 << 10

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
	// Until describe says the plugin's name, it runs under the default limits; then the
	// operator's settings for that name apply (memory caps through the instance allocator).
	limits := r.cfg.Defaults.withDefaults()
	base := filepath.Base(path)
	// The compiler sees the module with its data segments joined (compact.go): the same memory
	// image, a fraction of the structures wazero keeps for the module and copies per instance.
	module, _, _ := compactData(data)
	cache, ownCache, err := r.moduleCache(sum)
	if err != nil {
		return nil, fmt.Errorf("compilation cache: %w", err)
	}
	r.compileSlot <- struct{}{}
	cctx := ctx
	if r.kernel != nil {
		cctx = experimental.WithFunctionListenerFactory(ctx, r.kernel.listeners())
	}
	compiled, err := extism.NewCompiledPlugin(cctx,
		extism.Manifest{
			Wasm:   []extism.Wasm{extism.WasmData{Data: module, Name: "main"}},
			Memory: &extism.ManifestMemory{MaxPages: r.maxMemoryPages(), MaxHttpResponseBytes: 0, MaxVarBytes: 0},
		},
		extism.PluginConfig{
			EnableWasi: true,
			RuntimeConfig: wazero.NewRuntimeConfig().
				WithCompilationCache(cache).
				WithCloseOnContextDone(closeOnDeadline),
		},
		r.fns)
	<-r.compileSlot
	if err != nil {
		closeCache(cache, ownCache)
		return nil, fmt.Errorf("compile: %w", err)
	}
	if ctx.Err() != nil {
		compiled.Close(context.Background())
		closeCache(cache, ownCache)
		return nil, fmt.Errorf("the load deadline of %v passed while the file waited for the compiler or compiled: %w", limits.LoadTimeout, context.Cause(ctx))
	}
	v := &version{rt: r, file: path, sha256: sum, abi: guestABI, info: info, compiled: compiled, limits: limits, loaded: time.Now()}
	if ownCache {
		v.cache = cache
	}
	v.breaker = breaker{crashes: limits.BreakerCrashes, window: limits.BreakerWindow}
	v.pool = newPool([numClasses]int{classOut: limits.PoolSize, classIn: limits.InboundPoolSize}, v.newInstance)

	// Create one instance eagerly and ask it who it is, within what is left of the load's
	// deadline (the guest's runtime starts in this call; see Limits.LoadTimeout).
	out, err := v.call(ctx, Caller{Plugin: base}, abi.ExportDescribe, nil, remaining(ctx, limits.LoadTimeout))
	if err != nil {
		v.close()
		return nil, fmt.Errorf("describe: %w", err)
	}
	if len(out) > MaxManifestBytes {
		v.close()
		return nil, fmt.Errorf("describe returned a manifest of %d bytes; at most %d are accepted (it is shown in every plugin listing)", len(out), MaxManifestBytes)
	}
	if err := json.Unmarshal(out, &v.manifest); err != nil {
		v.close()
		return nil, fmt.Errorf("describe returned malformed JSON: %v", err)
	}
	if err := checkManifest(&v.manifest, info, guestABI); err != nil {
		v.close()
		return nil, err
	}
	// Apply the operator's settings for the plugin's name: one identity everywhere after load,
	// whatever the file is called.
	v.settings = r.settings(v.manifest.Name)
	if l := v.settings.Limits; l != (Limits{}) {
		v.limits = l.withDefaults()
	}
	v.breaker = breaker{crashes: v.limits.BreakerCrashes, window: v.limits.BreakerWindow}
	v.pool.setMax([numClasses]int{classOut: v.limits.PoolSize, classIn: v.limits.InboundPoolSize})
	v.pool.setCold(v.limits.ColdTimeout)
	v.egress = egress.Policy{Manifest: v.manifest.Egress, Narrow: v.settings.EgressNarrow, Extra: v.settings.EgressExtra,
		Internal: v.settings.EgressInternal, Scopes: v.manifest.EgressScopes, Alias: v.settings.EgressAlias}
	for _, pat := range v.manifest.Egress {
		for _, api := range egress.PlatformAPIs() {
			if !egress.Covers(pat, api) {
				continue
			}
			w := fmt.Sprintf("unscoped egress %q reaches %s, a chat platform's API, from every export: it could post messages outside send, behind the session boundary; declare egress_scopes", pat, api)
			if r.cfg.StrictEgress {
				v.close()
				return nil, fmt.Errorf("refused under strict_egress: %s", w)
			}
			v.warnings = append(v.warnings, w)
			r.log.Warn("plugin egress is unscoped", "plugin", v.manifest.Name, "warning", w)
			break
		}
	}
	v.metrics = r.cfg.Metrics.forPlugin(v.manifest.Name)
	v.metrics.instances(float64(v.pool.size())) // the eager instance, created before metrics
	if err := v.configureProfiles(ctx); err != nil {
		v.close()
		return nil, err
	}
	if v.manifest.Has(abi.CapWebhook) || v.manifest.Has(abi.CapPoll) {
		// The instance that ran describe stays warm for inbound calls: a webhook should not
		// pay for creating and initializing an instance while sends hold theirs.
		v.pool.reserveIdle(classIn, 1)
	}
	return v, nil
}

func (r *Runtime) settings(name string) Settings {
	if s, ok := r.allSettings()[name]; ok {
		return s
	}
	return r.cfg.Other
}

// allSettings is the operator's settings by plugin name (not to be changed: SetSettings
// replaces the whole map).
func (r *Runtime) allSettings() map[string]Settings {
	r.settingsMu.Lock()
	defer r.settingsMu.Unlock()
	return r.cfg.Plugins
}

// SetSettings replaces the operator's settings of the plugin called name. They apply from its
// next load: a version already loaded keeps the settings it was configured with.
func (r *Runtime) SetSettings(name string, s Settings) {
	r.settingsMu.Lock()
	defer r.settingsMu.Unlock()
	m := maps.Clone(r.cfg.Plugins)
	if m == nil {
		m = map[string]Settings{}
	}
	m[name] = s
	r.cfg.Plugins = m
}

// Plugin is one loaded plugin, stable across reloads: it always calls the current version.
type Plugin struct {
	name string
	rt   *Runtime

	mu  sync.RWMutex // guards cur
	cur *version

	statusMu sync.Mutex                   // guards status
	status   map[string]abi.ProfileStatus // by profile: what the last poll reported (ABI 1.1)

	schedMu   sync.Mutex               // guards sched and tickCrash
	sched     map[string]chan struct{} // scheduler profile → its one-call lock (see exclusive)
	tickCrash map[string]string        // scheduler profile → how its last tick crashed (CrashError.Reason), until a tick returns
}

// Name is the plugin's manifest name.
func (p *Plugin) Name() string { return p.name }

// Manifest is the current version's manifest.
func (p *Plugin) Manifest() abi.Manifest { return p.current().manifest }

// PluginFor returns the name of the platform plugin that serves platform for profile: the
// platform's one owner, if it serves that profile.
func (r *Runtime) PluginFor(platform, profile string) (string, bool) {
	r.mu.Lock()
	p := r.plugins[r.owners[platform]]
	r.mu.Unlock()
	if p == nil || !slices.Contains(p.Profiles(), profile) {
		return "", false
	}
	return p.Name(), true
}

// Owner returns the name of the plugin that owns platform.
func (r *Runtime) Owner(platform string) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	name, ok := r.owners[platform]
	return name, ok
}

// Caller is the identity the plugin acts under for profile: its name, kind and platform.
func (p *Plugin) Caller(profile string) Caller {
	v := p.current()
	if v == nil {
		return Caller{Plugin: p.name, Profile: profile}
	}
	return v.caller(profile)
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
	cache    wazero.CompilationCache // the file's own on-disk cache, closed with the version; nil: the runtime's
	pool     *pool
	breaker  breaker
	metrics  *pluginMetrics
	inflight sync.WaitGroup

	profMu   sync.RWMutex
	profiles map[string]*profileState

	warnings   []string     // shown to the operator (unscoped egress to a platform API)
	denied     atomic.Int64 // egress calls the policy refused
	lastDenied atomic.Value // string: the last refusal
}

type profileState struct {
	config   json.RawMessage
	problems []string // non-empty: the profile is disabled
}

func (v *version) caller(profile string) Caller {
	return Caller{Plugin: v.manifest.Name, Kind: v.manifest.Kind, Platform: v.manifest.Platform, Profile: profile, Egress: v.egress}
}

func (v *version) newInstance(ctx context.Context) (*instance, error) {
	inst := &instance{stderr: &headBuffer{max: 8 << 10}, mem: &instanceMemory{limit: v.memoryLimit}}
	// wazero notifies inst when one of its modules closes (proc_exit included), so the runtime
	// knows an instance died even when the call that killed it "succeeded"; and it allocates
	// the instance's memories through inst.mem, which caps and counts them.
	ictx := experimental.WithMemoryAllocator(experimental.WithCloseNotifier(ctx, inst), inst.mem)
	p, err := v.compiled.Instance(ictx, extism.PluginInstanceConfig{
		ModuleConfig: wazero.NewModuleConfig().
			WithStderr(inst.stderr).
			WithSysWalltime().
			WithSysNanotime().
			WithNanosleep(sleepSlice).
			WithRandSource(rand.Reader),
	})
	if err != nil {
		return nil, fmt.Errorf("instantiate: %w", err)
	}
	inst.p = p
	v.metrics.instances(1)
	return inst, nil
}

// maxSleepSlice bounds one guest sleep (WASI poll_oneoff with a clock). A guest that asks for
// longer wakes up, finds its timer not yet due and sleeps again, so the call's deadline (checked
// when the guest runs) still stops a guest that sleeps past it.
const maxSleepSlice = 20 * time.Millisecond

// sleepSlice really sleeps, unlike wazero's default (which returns at once, so that a guest's
// time.Sleep spins a core until the time has passed), but at most maxSleepSlice at a time.
func sleepSlice(ns int64) { time.Sleep(min(time.Duration(ns), maxSleepSlice)) }

// memoryLimit is the cap of each of an instance's memories, in bytes.
func (v *version) memoryLimit() uint64 { return uint64(v.limits.MemoryPages) << 16 }

func (v *version) discard(inst *instance, c class) {
	v.pool.discard(inst, c)
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
	closeCache(v.cache, true)
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
	Reason string // "deadline", "trap", "exit" (proc_exit during the call)
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

// Unwrap returns the cause of the crash (a deadline's context.DeadlineExceeded, the trap).
func (e *CrashError) Unwrap() error { return e.Err }

// Is reports ErrCrashed: every crash is one, whatever its cause.
func (e *CrashError) Is(target error) bool { return target == ErrCrashed }

// ErrCrashed is what errors.Is finds in the error of a call whose instance died (a
// *CrashError), for callers that need no details (the public host package).
var ErrCrashed = errors.New("plugin instance crashed")

// ErrFailed is what errors.Is finds in the error of a call refused because the plugin's
// breaker tripped (a *FailedError).
var ErrFailed = errors.New("plugin failed after repeated crashes")

// FailedError is returned by calls to a plugin whose breaker tripped.
type FailedError struct {
	Plugin string
	Last   error // the last crash (a *CrashError)
}

func (e *FailedError) Error() string {
	return fmt.Sprintf("plugin %s is failed after repeated crashes (last: %v)", e.Plugin, e.Last)
}

// Unwrap returns the last crash, so errors.As finds the *CrashError (its reason, the guest's
// last words) behind a failed plugin's refusal.
func (e *FailedError) Unwrap() error { return e.Last }

// Is reports ErrFailed.
func (e *FailedError) Is(target error) bool { return target == ErrFailed }

func (v *version) call(ctx context.Context, c Caller, export string, input []byte, timeout time.Duration) ([]byte, error) {
	return v.callOn(ctx, nil, c, export, input, timeout)
}

// callOn calls export on inst (a reserved instance), or on one from the pool when inst is nil.
// It always consumes inst: back to the pool, or discarded.
func (v *version) callOn(ctx context.Context, inst *instance, c Caller, export string, input []byte, timeout time.Duration) ([]byte, error) {
	start := time.Now()
	c.Export = export
	cls := classOf(export)
	unused := func() {
		if inst != nil {
			v.pool.put(inst, cls)
		}
	}
	if err := v.breaker.check(c.Plugin); err != nil {
		unused()
		v.metrics.call(export, "failed", start)
		return nil, err
	}
	if len(input) > v.limits.MaxInput {
		unused()
		v.metrics.call(export, "too_large", start)
		return nil, abi.Errorf(abi.CodeTooLarge, "%s input of %d bytes exceeds the cap of %d", export, len(input), v.limits.MaxInput)
	}
	parent := ctx
	ctx, cancel := context.WithTimeout(parent, timeout) // bounds the wait for an instance, then the call
	defer cancel()
	if inst != nil && inst.dead.Load() {
		v.discard(inst, cls) // died while reserved: take a live one, as liveInstance does
		inst = nil
	}
	if inst == nil {
		var err error
		if inst, err = v.liveInstance(ctx, cls); err != nil {
			v.metrics.call(export, "no_instance", start)
			return nil, fmt.Errorf("plugin %s: no instance available: %w", c.Plugin, err)
		}
	}
	if !inst.started && export != abi.ExportDescribe {
		if err := v.start(parent, inst, c, cls); err != nil {
			return nil, err
		}
		var cancelCall context.CancelFunc
		ctx, cancelCall = context.WithTimeout(parent, timeout) // the call's own deadline starts now
		defer cancelCall()
	}
	st := &callState{caller: c}
	rc, out, err := inst.p.CallWithContext(context.WithValue(ctx, callKey{}, st), export, input)

	if inst.dead.Load() || (err != nil && !isGuestError(inst, err)) {
		// The instance is dead or its state is suspect: never reuse it.
		return nil, v.crashed(ctx, inst, cls, c, export, "call deadline", timeout, err, start)
	}
	inst.started = true
	inst.stderr.take()
	switch keep := int64(v.limits.KeepMemoryPages) << 16; {
	case st.panicked != nil:
		v.discard(inst, cls)
	case inst.mem.bytes() > keep:
		// A healthy instance that grew large is not kept idle holding that memory.
		v.rt.log.Info("plugin instance discarded after its call: its memory grew past what is kept idle",
			"plugin", c.Plugin, "export", export, "memory_mib", inst.mem.bytes()>>20, "keep_mib", keep>>20)
		v.discard(inst, cls)
	case export == abi.ExportTick:
		if v.pool.putAfterTick(inst, cls) {
			v.metrics.instances(-1)
			v.rt.reclaim() // an idle host gives back what the tick's instance held, as trimIdle does
		}
	default:
		v.pool.put(inst, cls)
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

// start runs describe on inst, an instance no call has run on yet, so that the guest's runtime
// starts (inside its first call: Go's package initialisers, AssemblyScript's start function)
// under LoadTimeout, as it does for the first instance at load, not under the deadline of the
// call that needed the instance. A start that outlasted that deadline would otherwise count as a
// crash of the call, and the call would get what is left of its deadline. The caller's
// cancellation still stops the start; its deadline does not. It consumes inst on failure.
func (v *version) start(ctx context.Context, inst *instance, c Caller, cls class) error {
	begin := time.Now()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), v.limits.LoadTimeout)
	defer cancel()
	stop := context.AfterFunc(ctx, func() {
		if errors.Is(ctx.Err(), context.Canceled) {
			cancel()
		}
	})
	defer stop()
	st := &callState{caller: c}
	_, _, err := inst.p.CallWithContext(context.WithValue(sctx, callKey{}, st), abi.ExportDescribe, nil)
	if inst.dead.Load() || (err != nil && !isGuestError(inst, err)) || st.panicked != nil {
		if err == nil && st.panicked != nil {
			err = st.panicked
		}
		return v.crashed(sctx, inst, cls, c, abi.ExportDescribe, "start deadline (LoadTimeout)", v.limits.LoadTimeout, err, begin)
	}
	inst.started = true
	inst.stderr.take()
	return nil
}

// crashed discards inst, whose call of export (bounded by ctx, timeout long) failed with err or
// left the instance dead, and returns the error for the caller: not a crash if ctx was cancelled
// (the caller gave up), else a *CrashError, recorded by the breaker.
func (v *version) crashed(ctx context.Context, inst *instance, cls class, c Caller, export, bound string, timeout time.Duration, err error, start time.Time) error {
	v.discard(inst, cls)
	if errors.Is(ctx.Err(), context.Canceled) {
		// The caller gave up (the host is stopping, a loop was cancelled): the instance was
		// stopped for it, which says nothing about the plugin. Not a crash.
		inst.stderr.take()
		v.metrics.call(export, "cancelled", start)
		return fmt.Errorf("plugin %s: %s cancelled by the host: %w", c.Plugin, export, context.Canceled)
	}
	reason := "trap"
	var exit *sys.ExitError
	switch {
	case ctx.Err() != nil:
		reason = "deadline"
		err = fmt.Errorf("%s of %v exceeded; instance stopped: %w", bound, timeout, err)
	case errors.As(err, &exit):
		reason = "exit"
		err = fmt.Errorf("the guest called proc_exit(%d) and its instance is closed: %w", exit.ExitCode(), err)
	case err == nil:
		// proc_exit(0): Extism reports a clean return, but the module is closed. Whatever
		// the guest wrote before exiting is not trusted.
		reason = "exit"
		err = fmt.Errorf("the guest called proc_exit(%d) and its instance is closed", inst.exitCode.Load())
	}
	crash := &CrashError{Plugin: c.Plugin, Export: export, Reason: reason, Err: err, Stderr: inst.stderr.take()}
	if reason == "trap" {
		v.rt.reclaim()
	}
	v.metrics.crash(reason)
	v.metrics.call(export, "crash", start)
	if v.breaker.record(crash) {
		v.rt.log.Error("plugin failed: crash breaker tripped", "plugin", c.Plugin, "error", crash)
	} else {
		v.rt.log.Warn("plugin instance crashed and was discarded", "plugin", c.Plugin, "export", export, "error", crash)
	}
	return crash
}

// liveInstance takes an instance from the pool, discarding any that died while idle (a module
// closed by proc_exit or by the host). A dead instance refuses a call without running guest
// code, so taking the next one is a safe retry, not a second attempt of the call.
func (v *version) liveInstance(ctx context.Context, c class) (*instance, error) {
	for {
		inst, err := v.pool.get(ctx, c)
		if err != nil || !inst.dead.Load() {
			return inst, err
		}
		v.rt.log.Warn("dead plugin instance found idle in the pool; discarded without counting a crash", "plugin", v.manifest.Name)
		v.discard(inst, c)
	}
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
	total  int         // crashes of this version, whether or not they tripped the breaker
	last   *CrashError // the latest of them
	lastAt time.Time
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
	b.total++
	b.last, b.lastAt = err, now
	if len(b.times) >= b.crashes && b.failed == nil {
		b.failed = &FailedError{Plugin: err.Plugin, Last: err}
		return true
	}
	return false
}

// crashed returns how many crashes were recorded, the latest and when.
func (b *breaker) crashed() (int, *CrashError, time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.total, b.last, b.lastAt
}

func (b *breaker) state() (string, string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failed != nil {
		return "failed", b.failed.Last.Error()
	}
	return "active", ""
}
