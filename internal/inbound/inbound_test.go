package inbound

import (
	"context"
	"log/slog"
	"testing"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/auth"
	"github.com/hermes-host/hermes-host/internal/plugin"
)

type verdict string

func (v verdict) Admit(context.Context, string, string, abi.InboundEvent) (auth.Decision, error) {
	return auth.Decision{Verdict: string(v)}, nil
}

type recorder struct{ got []abi.InboundEvent }

func (r *recorder) Dispatch(_ context.Context, _, _ string, ev abi.InboundEvent) (abi.DispatchReply, error) {
	r.got = append(r.got, ev)
	return abi.DispatchReply{}, nil
}

// The door forces the caller's platform and profile; an observed message is kept as an
// observation, an observed button press is dropped (it is acted on or not at all), and a
// refused event reaches nothing.
func TestDoor(t *testing.T) {
	c := plugin.Caller{Plugin: "telegram", Platform: "telegram", Profile: "main"}
	forged := abi.Source{Platform: "slack", Profile: "other", ChatID: "1", UserID: "u"}
	for _, tc := range []struct {
		verdict, kind, want string // want: the kind the engine gets, "" for nothing
	}{
		{auth.Allow, abi.EventMessage, abi.EventMessage},
		{auth.Allow, abi.EventCallback, abi.EventCallback},
		{auth.Observe, abi.EventMessage, abi.EventObserve},
		{auth.Observe, abi.EventCallback, ""},
		{auth.Refuse, abi.EventMessage, ""},
		{auth.Refuse, abi.EventCallback, ""},
	} {
		rec := &recorder{}
		d := &Door{Engine: rec, Gate: verdict(tc.verdict), Log: slog.New(slog.DiscardHandler)}
		if _, err := d.Dispatch(context.Background(), c, abi.InboundEvent{ID: "e", Kind: tc.kind, Source: forged, CallbackID: "approve:apx"}); err != nil {
			t.Fatal(err)
		}
		switch {
		case tc.want == "" && len(rec.got) != 0:
			t.Errorf("%s %s reached the engine: %+v", tc.verdict, tc.kind, rec.got)
		case tc.want != "" && (len(rec.got) != 1 || rec.got[0].Kind != tc.want):
			t.Errorf("%s %s: the engine got %+v, want one %s", tc.verdict, tc.kind, rec.got, tc.want)
		case tc.want != "" && (rec.got[0].Source.Platform != "telegram" || rec.got[0].Source.Profile != "main"):
			t.Errorf("the event kept a forged source: %+v", rec.got[0].Source)
		}
	}
}
