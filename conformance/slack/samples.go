package slack

import (
	"embed"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/conformance"
	st "github.com/hermes-host/hermes-host/conformance/slacktest"
)

// samples/*.json are Events API request bodies as Slack posts them (the envelope and event
// fields as in its documentation), for the app, workspace and bot user of slacktest's defaults.
//
//go:embed samples/*.json
var sampleFiles embed.FS

// sampleWants says what a correct adapter makes of each shipped request.
var sampleWants = map[string][]conformance.Expect{
	"app_mention.json": {{Kind: abi.EventMessage, ChatID: general, UserID: ann, Text: "what is on the schedule today?", Mentioned: true}},
	"message_im.json":  {{Kind: abi.EventMessage, ChatType: abi.ChatDM, ChatID: "D0ANNBOT01", UserID: ann, Text: "hello from a direct message"}},
	// A reply in a thread is in that thread: its thread id is the parent's ts.
	"thread_reply.json": {{Kind: abi.EventMessage, ChatID: general, ThreadID: "1764676860.000200",
		UserID: ann, Text: "and the deploy?", Mentioned: true}},
	// The bot's own message comes back as an event: accepted, never a turn.
	"own_bot_message.json": nil,
}

// Samples returns the Events API requests the Slack profile ships, with what each must become.
// They carry no signature: Slack signs each request with the app's signing secret and the time
// it sends it (X-Slack-Signature, X-Slack-Request-Timestamp), which the profile's check adds.
func Samples() []conformance.Sample {
	return conformance.MustLoadSamples(sampleFiles, "samples", sampleWants)
}

// checkSamples: each shipped request, signed as Slack signs it, is accepted and becomes the
// events a correct adapter makes of it.
func (s *suite) checkSamples() (string, error) {
	var errs []error
	samples := Samples()
	for _, sample := range samples {
		ts := strconv.FormatInt(time.Now().Unix(), 10)
		res, err := s.current().Webhook(s.ctx, profEvents, abi.WebhookRequest{Method: "POST", Path: "/hooks/slack/" + profEvents,
			Headers: map[string][]string{"Content-Type": {"application/json"}, st.HeaderTimestamp: {ts},
				st.HeaderSignature: {st.Signature(s.slack.SigningSecret(), ts, sample.Body)}}, Body: sample.Body})
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: webhook failed as a call: %w", sample.Name, err))
			continue
		}
		if err := conformance.CheckSample(sample, res); err != nil {
			errs = append(errs, err)
		}
	}
	return fmt.Sprintf("%d requests shaped as Slack posts them", len(samples)), errors.Join(errs...)
}
