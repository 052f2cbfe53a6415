package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/abi/schema"
	"github.com/hermes-host/hermes-host/host"
)

// The normal-path checks call each export the way the host does in normal operation, with a
// well-formed request for the "conformance" profile, and validate what the plugin answers
// against the ABI's JSON Schema (abi/schema): a result that is not valid JSON of the right
// shape, a webhook status outside 100-599, an event without a chat type or a send that reports
// success without a message id all fail. The plugin's platform is not reachable from the suite,
// so a send may fail; it must fail with a typed result or an abi.Error, never garbage.

// profileName is the profile the suite configures.
const profileName = "conformance"

func knownCode(c string) bool {
	switch c {
	case abi.CodeBadRequest, abi.CodeDenied, abi.CodeNotFound, abi.CodeUnavailable, abi.CodeTimeout, abi.CodeTooLarge,
		abi.CodeConflict, abi.CodeStale, abi.CodeUnsupported, abi.CodeIO, abi.CodeUncertain, abi.CodeClosed, abi.CodeInternal:
		return true
	}
	return false
}

// normalPath runs the normal-path checks; add records each result.
func normalPath(ctx context.Context, p *host.Plugin, m abi.Manifest, config json.RawMessage, samples []WebhookSample, add func(name string, start time.Time, err error, detail string)) {
	start := time.Now()
	mb, _ := json.Marshal(m)
	add("normal/describe", start, schema.Validate("Manifest", mb), "")

	if len(config) == 0 {
		config = json.RawMessage(`{}`)
	}
	// Every export below is called as the host calls it, for the suite's profile.
	call := func(export string, req any) ([]byte, error) {
		in, err := json.Marshal(req)
		if err != nil {
			return nil, err
		}
		return p.Call(ctx, profileName, export, in)
	}
	// answered validates a result, or requires a failure to be a well-formed abi.Error.
	answered := func(name, export, resultType string, start time.Time, out []byte, err error, more func([]byte) error) {
		if err != nil {
			e := abi.AsError(err)
			switch {
			case errors.Is(err, host.ErrCrashed):
				add(name, start, fmt.Errorf("trapped: %v", firstLine(err.Error())), "")
			case !knownCode(e.Code):
				add(name, start, fmt.Errorf("%s failed with an unknown error code %q", export, e.Code), "")
			default:
				add(name, start, nil, "answered an error: "+firstLine(e.Error()))
			}
			return
		}
		if err := schema.Validate(resultType, out); err != nil {
			add(name, start, err, "")
			return
		}
		if more != nil {
			err = more(out)
		}
		add(name, start, err, "valid "+resultType)
	}

	start = time.Now()
	out, err := call(abi.ExportConfigure, abi.ConfigureRequest{Call: abi.Call{Profile: profileName, Config: config}})
	answered("normal/configure", abi.ExportConfigure, "ConfigureResult", start, out, err, nil)

	switch m.Kind {
	case abi.KindScheduler:
		start = time.Now()
		out, err = call(abi.ExportTick, abi.TickRequest{Call: abi.Call{Profile: profileName, Config: config}, UnixMs: time.Now().UnixMilli()})
		answered("normal/tick", abi.ExportTick, "TickResult", start, out, err, nil)
		if m.Has(abi.CapJobs) {
			start = time.Now()
			out, err = call(abi.ExportJobs, abi.JobsRequest{Call: abi.Call{Profile: profileName, Config: config}, Op: abi.JobsList})
			answered("normal/jobs", abi.ExportJobs, "JobsResult", start, out, err, nil)
		}
		return
	}

	start = time.Now()
	out, err = call(abi.ExportSend, abi.SendRequest{Call: abi.Call{Profile: profileName, Config: config},
		Message: abi.OutboundMessage{ChatType: abi.ChatDM, ChatID: "conformance", UserID: "conformance", Text: "hello from the conformance suite"}})
	answered("normal/send", abi.ExportSend, "SendResult", start, out, err, func(b []byte) error {
		var r abi.SendResult
		json.Unmarshal(b, &r)
		if r.Error == nil && len(r.MessageIDs) == 0 {
			return errors.New("send reported success without a message id")
		}
		return nil
	})

	if m.Has(abi.CapWebhook) {
		start = time.Now()
		out, err = call(abi.ExportWebhook, abi.WebhookRequest{Call: abi.Call{Profile: profileName, Config: config}, Method: "POST",
			Path: "/hooks/" + m.Name + "/" + profileName, Headers: map[string][]string{"Content-Type": {"application/json"}}, Body: []byte(`{}`)})
		answered("normal/webhook", abi.ExportWebhook, "WebhookResult", start, out, err, nil)
	}
	for _, sample := range samples {
		name := "normal/webhook-sample " + sample.Name
		start = time.Now()
		if !m.Has(abi.CapWebhook) {
			add(name, start, errors.New("the plugin does not declare the webhook capability"), "")
			continue
		}
		headers := map[string][]string{"Content-Type": {"application/json"}}
		for k, v := range sample.Headers {
			headers[k] = v
		}
		out, err = call(abi.ExportWebhook, abi.WebhookRequest{Call: abi.Call{Profile: profileName, Config: config}, Method: "POST",
			Path: "/hooks/" + m.Name + "/" + profileName, Headers: headers, Body: sample.Body})
		if err != nil {
			add(name, start, fmt.Errorf("the sample failed: %v", firstLine(err.Error())), "")
			continue
		}
		answered(name, abi.ExportWebhook, "WebhookResult", start, out, nil, func(b []byte) error {
			var r abi.WebhookResult
			json.Unmarshal(b, &r)
			if st := r.Response.Status; st < 200 || st > 299 {
				return fmt.Errorf("the sample was refused: status %d %q", st, clip(r.Response.Body))
			}
			for i, ev := range r.Events {
				if ev.ID == "" || ev.Source.ChatID == "" || ev.Source.ChatType == "" {
					return fmt.Errorf("event %d lacks its id, chat_id or chat_type: %+v", i, ev)
				}
			}
			return nil
		})
	}
	if m.Has(abi.CapPoll) {
		start = time.Now()
		out, err = call(abi.ExportPoll, abi.PollRequest{Call: abi.Call{Profile: profileName, Config: config}, WaitMs: 10})
		answered("normal/poll", abi.ExportPoll, "PollResult", start, out, err, nil)
	}
}

func clip(b []byte) string {
	if len(b) > 60 {
		return string(b[:60]) + "…"
	}
	return string(b)
}
