package telegram

import (
	"embed"
	"errors"
	"fmt"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/conformance"
	tgt "github.com/hermes-host/hermes-host/conformance/telegramtest"
)

// samples/*.json are updates as the Bot API posts them to a webhook (the fields and their shape
// as in its documentation), for the bot telegramtest.DefaultBotUsername.
//
//go:embed samples/*.json
var sampleFiles embed.FS

// sampleWants says what a correct adapter makes of each shipped update.
var sampleWants = map[string][]conformance.Expect{
	"private_text.json": {{Kind: abi.EventMessage, ChatType: abi.ChatDM, ChatID: "580193422", UserID: "580193422",
		Text: "hello from a private chat"}},
	"group_mention.json": {{Kind: abi.EventMessage, ChatType: abi.ChatGroup, ChatID: "-1001987654321", UserID: "580193422",
		Text: "what is on the schedule today?", Mentioned: true}},
	// A forum topic's message is in the topic (its thread); the topic's creation message that
	// Telegram attaches as reply_to_message is not a reply.
	"forum_topic.json": {{Kind: abi.EventMessage, ChatType: abi.ChatForum, ChatID: "-1002233445566", ThreadID: "905",
		UserID: "580193422", Text: "status of the deploy?", Mentioned: true}},
	// An edit never starts a turn: the transcript may learn the new wording (observe).
	"edited_message.json": {{Kind: abi.EventObserve, ChatType: abi.ChatDM, ChatID: "580193422", Text: "hello from a private chat"}},
}

// Samples returns the webhook requests the Telegram profile ships, with what each must become.
// Their headers are empty: a webhook-mode profile needs its secret_token in
// X-Telegram-Bot-Api-Secret-Token, which the profile's check adds.
func Samples() []conformance.Sample {
	return conformance.MustLoadSamples(sampleFiles, "samples", sampleWants)
}

// checkSamples: each shipped update, pushed with the profile's secret, is accepted and becomes
// the events a correct adapter makes of it.
func (s *suite) checkSamples() (string, error) {
	var errs []error
	samples := Samples()
	for _, sample := range samples {
		res, err := s.current().Webhook(s.ctx, profHook, abi.WebhookRequest{Method: "POST", Path: "/hooks/telegram/" + profHook,
			Headers: map[string][]string{"Content-Type": {"application/json"}, tgt.SecretHeader: {hookSecret}}, Body: sample.Body})
		if err != nil {
			errs = append(errs, errors.New(sample.Name+": webhook failed as a call: "+err.Error()))
			continue
		}
		if err := conformance.CheckSample(sample, res); err != nil {
			errs = append(errs, err)
		}
	}
	return fmt.Sprintf("%d updates shaped as the Bot API posts them", len(samples)), errors.Join(errs...)
}
