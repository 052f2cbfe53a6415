package plugin

import (
	"context"
	"errors"
	"fmt"
)

// ErrNoPlugin is returned by Reload for a name no loaded plugin has.
var ErrNoPlugin = errors.New("no such plugin")

// Reload loads plugin name again from its file, even if the file is unchanged: a fresh version
// (new instances, a closed crash breaker) replaces the serving one once its calls drain, as a
// changed file would. The operator's way back for a plugin that failed after repeated crashes
// once its cause is fixed outside it (a platform, a credential). A file that no longer loads is
// rejected as in Scan, and the version serving keeps serving. A load of the same content already
// under way (a scan) is waited for by neither: Reload then says so.
func (r *Runtime) Reload(ctx context.Context, name string) (Info, error) {
	p := r.Get(name)
	if p == nil {
		return Info{}, fmt.Errorf("%w: %q", ErrNoPlugin, name)
	}
	path := p.File()
	if path == "" {
		return Info{}, fmt.Errorf("plugin %s: %w", name, ErrUnloaded)
	}
	r.scanMu.Lock()
	f := r.readFile(path)
	data, sum, err := f.data, f.seen.sum, f.err
	if err != nil {
		r.scanMu.Unlock()
		return Info{}, fmt.Errorf("plugin %s: reading %s: %w", name, path, err)
	}
	r.seen[path] = f.seen
	r.mu.Lock()
	busy := r.loading[path] != ""
	if !busy {
		r.loading[path] = sum
	}
	r.mu.Unlock()
	r.scanMu.Unlock()
	if busy {
		return p.Info(), fmt.Errorf("plugin %s is being loaded already: look again in a moment", name)
	}
	select {
	case r.loadSlots <- struct{}{}:
		err = r.loadFile(ctx, path, data, sum)
		<-r.loadSlots
	case <-ctx.Done():
		err = fmt.Errorf("not loaded: %w", ctx.Err())
	}
	r.finishLoad(path, sum, err)
	if err != nil {
		return p.Info(), fmt.Errorf("plugin %s: reloading %s failed (the version serving keeps serving): %w", name, path, err)
	}
	if np := r.Get(name); np != nil {
		return np.Info(), nil
	}
	return p.Info(), nil
}
