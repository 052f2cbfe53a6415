// Package scheduler is the host's side of scheduler plugins (cron.wasm): it hands jobs to them
// through their jobs export (ABI 1.1) for the CLI, the admin API and chat users (the /cron
// command), and wakes a scheduler's tick loop when a change should take effect at once.
//
// The plugin owns its jobs (their syntax, their state in its kv store); the host only routes a
// request to the right plugin and profile and, for chat users, scopes it to their chat. The
// plugin runtime serializes changing calls with the plugin's ticks (plugin.Plugin.Jobs).
package scheduler

import (
	"context"
	"fmt"
	"slices"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/plugin"
)

// Plugins finds loaded plugins (the runtime).
type Plugins interface {
	Plugins() []*plugin.Plugin
}

// Service routes job requests to scheduler plugins.
type Service struct {
	plugins Plugins
	kick    func(plugin, profile string)
}

// New returns a Service over plugins. kick, if not nil, wakes the tick loop of a scheduler's
// profile; it is called after every change, so a job due sooner than the loop's next wake-up
// (or run now) is not kept waiting.
func New(plugins Plugins, kick func(plugin, profile string)) *Service {
	return &Service{plugins: plugins, kick: kick}
}

// Find returns the scheduler plugin that manages jobs for profile: the one named name, or,
// when name is empty, the only one there is.
func (s *Service) Find(name, profile string) (*plugin.Plugin, error) {
	var found []*plugin.Plugin
	for _, p := range s.plugins.Plugins() {
		m := p.Manifest()
		if m.Kind != abi.KindScheduler || !m.Has(abi.CapJobs) || (name != "" && p.Name() != name) {
			continue
		}
		if !slices.Contains(p.Profiles(), profile) {
			continue
		}
		found = append(found, p)
	}
	switch {
	case len(found) == 1:
		return found[0], nil
	case len(found) > 1:
		var names []string
		for _, p := range found {
			names = append(names, p.Name())
		}
		return nil, abi.Errorf(abi.CodeConflict, "several schedulers serve profile %q (%v): name one", profile, names)
	case name != "":
		return nil, abi.Errorf(abi.CodeNotFound, "no scheduler plugin %q with jobs serves profile %q", name, profile)
	}
	return nil, abi.Errorf(abi.CodeNotFound, "no scheduler plugin with jobs serves profile %q (is cron.wasm in the plugins directory, with that profile configured?)", profile)
}

// Jobs hands req to the scheduler (name, or the only one) serving profile, and returns the
// plugin's name and answer. A change wakes the profile's tick loop.
func (s *Service) Jobs(ctx context.Context, name, profile string, req abi.JobsRequest) (string, *abi.JobsResult, error) {
	p, err := s.Find(name, profile)
	if err != nil {
		return "", nil, err
	}
	served := s.platforms(profile)
	req.Platforms = &served
	res, err := p.Jobs(ctx, profile, req)
	if err != nil {
		return p.Name(), nil, err
	}
	if req.Op != abi.JobsList && s.kick != nil {
		s.kick(p.Name(), profile)
	}
	return p.Name(), res, nil
}

// platforms lists the platforms served for profile: those of the loaded platform plugins that
// serve it, the ones a scheduler's hermes_send can reach: the scheduler refuses a target on any
// other when the job is created.
func (s *Service) platforms(profile string) []string {
	out := []string{}
	for _, p := range s.plugins.Plugins() {
		if m := p.Manifest(); m.Kind == abi.KindPlatform && m.Platform != "" && slices.Contains(p.Profiles(), profile) {
			out = append(out, m.Platform)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// errorText is an error as a chat user should read it.
func errorText(err error) string {
	if e := abi.AsError(err); e != nil && e.Code != abi.CodeInternal {
		return e.Message
	}
	return fmt.Sprint(err)
}
