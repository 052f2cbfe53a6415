package plugin

import (
	"context"
	"log/slog"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Watch calls rescan when the plugins directory changes (debounced, so a copy can finish) and
// every few seconds in case the file system does not report events, until ctx is done.
func Watch(ctx context.Context, dir string, log *slog.Logger, rescan func(context.Context)) {
	w, err := fsnotify.NewWatcher()
	if err == nil {
		if err = w.Add(dir); err != nil {
			w.Close()
			w = nil
		}
	}
	var events <-chan fsnotify.Event
	if w != nil {
		defer w.Close()
		events = w.Events
	} else {
		log.Warn("plugins directory not watched; rescanning periodically", "dir", dir, "error", err)
	}
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	var debounce <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-events:
			debounce = time.After(250 * time.Millisecond)
			continue
		case <-debounce:
		case <-tick.C:
		}
		debounce = nil
		rescan(ctx)
	}
}
