package telegram

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	tgt "github.com/hermes-host/hermes-host/conformance/telegramtest"
	"github.com/hermes-host/hermes-host/host"
)

// --- polling ---

// checkOffsets: a batch is returned without being confirmed to Telegram, and confirmed by the
// next poll (SPEC §2.5); every update comes exactly once.
func (s *suite) checkOffsets() (string, error) {
	bot := s.bot(profPoll)
	u1, u2 := bot.PrivateText(ada, "one"), bot.PrivateText(ada, "two")
	if _, err := s.pollFor(profPoll, u1, u2); err != nil {
		return "", err
	}
	if c := bot.Confirmed(); c >= u1.UpdateID {
		return "", fmt.Errorf("update %d was confirmed to Telegram before the next poll (the host had not recorded it yet)", c)
	}
	u3 := bot.PrivateText(ada, "three")
	if _, err := s.pollFor(profPoll, u3); err != nil {
		return "", err
	}
	if c := bot.Confirmed(); c != u2.UpdateID {
		return "", fmt.Errorf("after the second poll Telegram confirmed up to %d, want %d", c, u2.UpdateID)
	}
	return fmt.Sprintf("updates %d-%d once each, confirmed one poll later", u1.UpdateID, u3.UpdateID), nil
}

// checkRestart: the adapter is reloaded over the same kv store between batches (the host
// recorded the last batch, then restarted): the next poll returns only new updates.
func (s *suite) checkRestart() (string, error) {
	bot := s.bot(profPoll)
	u4 := bot.PrivateText(ada, "four")
	if _, err := s.load(); err != nil {
		return "", fmt.Errorf("reload: %w", err)
	}
	if _, err := s.pollFor(profPoll, u4); err != nil {
		return "", fmt.Errorf("first poll after the restart: %w", err)
	}
	res, err := s.poll(profPoll)
	if err != nil {
		return "", err
	}
	if len(res.Events) != 0 {
		return "", fmt.Errorf("replayed %d event(s) after the restart", len(res.Events))
	}
	if c := bot.Confirmed(); c != u4.UpdateID {
		return "", fmt.Errorf("Telegram confirmed up to %d, want %d", c, u4.UpdateID)
	}
	return "offset kept in the kv store", nil
}

// checkStrayWebhook: a poll-mode profile whose bot has a webhook set deletes it and polls.
func (s *suite) checkStrayWebhook() (string, error) {
	bot := s.bot(profStray)
	resp, err := s.tg.Client().PostForm(s.tg.BotURL(bot.Token())+"/setWebhook", url.Values{"url": {"https://example.invalid/hook"}})
	if err != nil {
		return "", err
	}
	resp.Body.Close()
	if bot.WebhookInfo().URL == "" {
		return "", errors.New("could not set the stray webhook on the fake")
	}
	for i, deadline := 0, time.Now().Add(s.opts.Timeout); i < maxPolls && bot.WebhookInfo().URL != "" && time.Now().Before(deadline); i++ {
		if _, err := s.poll(profStray); err != nil {
			return "", err
		}
	}
	if bot.WebhookInfo().URL != "" {
		return "", errors.New("the webhook is still set: getUpdates answers 409 until deleteWebhook")
	}
	u := bot.PrivateText(ada, "after webhook")
	if _, err := s.pollFor(profStray, u); err != nil {
		return "", err
	}
	return "deleteWebhook, then getUpdates", nil
}

// checkConflict: a long poll terminated by another getUpdates client (409) returns no events
// and a back-off.
func (s *suite) checkConflict() (string, error) {
	bot := s.tgLive.BotByToken(tokens[profConflict])
	type result struct {
		res *abi.PollResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		// The poll stays parked on the real-time fake until the competing request ends it.
		res, err := s.p.Poll(s.ctx, profConflict, 30*time.Second)
		done <- result{res, err}
	}()
	if err := bot.WaitPolling(s.opts.Timeout); err != nil {
		return "", fmt.Errorf("the adapter never long-polled (getUpdates with timeout > 0): %w", err)
	}
	resp, err := s.tgLive.Client().PostForm(s.tgLive.BotURL(bot.Token())+"/getUpdates", url.Values{"timeout": {"0"}})
	if err != nil {
		return "", err
	}
	resp.Body.Close()
	select {
	case r := <-done:
		if r.err != nil {
			return "", fmt.Errorf("poll failed instead of backing off: %w", r.err)
		}
		if len(r.res.Events) != 0 || r.res.BackoffMs <= 0 {
			return "", fmt.Errorf("poll answered %d events, backoff_ms %d; want none and a back-off", len(r.res.Events), r.res.BackoffMs)
		}
		return fmt.Sprintf("backoff_ms %d", r.res.BackoffMs), nil
	case <-time.After(s.opts.Timeout):
		return "", errors.New("poll did not return after its getUpdates was terminated with 409")
	}
}

// --- inbound ---

// checkTopics: thread ids only for is_topic_message; the topic's creation message is not a
// reply; General-topic replies and DM reply chains are not threads.
func (s *suite) checkTopics() (string, error) {
	bot := s.bot(profInbound)
	forum, topics := s.tg.AddForum(forumID, "Conformance forum", tgt.Topic{Name: "ops"})
	mention := "@" + bot.Username() + " "
	topic := bot.TopicText(forum.ID, topics[0], ada, mention+"in topic")
	root := bot.GroupText(forum.ID, bob, mention+"in General")
	general := bot.GeneralTopicReply(forum.ID, ada, root.Message.MessageID, mention+"General reply")
	dm := bot.PrivateText(ada, "root")
	chain := bot.DMReply(ada, dm.Message.MessageID, "chained")
	// Some General-topic messages come flagged as topic 1: the same chat as the unflagged ones.
	flagged := bot.InjectMessage(tgt.Message{From: &bob, Chat: forum, Text: mention + "flagged General",
		MessageThreadID: tgt.GeneralTopic, IsTopicMessage: true})
	evs, err := s.pollFor(profInbound, topic, root, general, dm, chain, flagged)
	if err != nil {
		return "", err
	}
	var errs []error
	if e, r := evs[5], evs[1]; e.Source.ChatType != r.Source.ChatType || e.Source.ThreadID != r.Source.ThreadID || e.Source.ChatID != r.Source.ChatID {
		errs = append(errs, fmt.Errorf("General topic flagged as topic 1: chat_type %q thread_id %q, unflagged: %q %q (two conversations for one chat)",
			e.Source.ChatType, e.Source.ThreadID, r.Source.ChatType, r.Source.ThreadID))
	}
	if e := evs[0]; e.Source.ChatType != abi.ChatForum || e.Source.ThreadID != itoa(topics[0]) || e.Source.ChatID != itoa(forum.ID) {
		errs = append(errs, fmt.Errorf("topic message: chat_type %q thread_id %q, want forum %d", e.Source.ChatType, e.Source.ThreadID, topics[0]))
	} else if e.ReplyTo != "" {
		errs = append(errs, fmt.Errorf("topic message: reply_to %q (the topic's creation message is not a reply)", e.ReplyTo))
	}
	if e := evs[1]; e.Source.ThreadID != "" || e.Source.ChatType == abi.ChatForum {
		errs = append(errs, fmt.Errorf("General-topic message: chat_type %q thread_id %q, want no thread", e.Source.ChatType, e.Source.ThreadID))
	}
	if e := evs[2]; e.Source.ThreadID != "" || e.Source.ChatType == abi.ChatForum {
		errs = append(errs, fmt.Errorf("General-topic reply: chat_type %q thread_id %q, want no thread", e.Source.ChatType, e.Source.ThreadID))
	}
	if e := evs[4]; e.Source.ChatType != abi.ChatDM || e.Source.ThreadID != "" {
		errs = append(errs, fmt.Errorf("DM reply chain: chat_type %q thread_id %q, want dm without thread", e.Source.ChatType, e.Source.ThreadID))
	} else if e.ReplyTo != itoa(dm.Message.MessageID) {
		errs = append(errs, fmt.Errorf("DM reply chain: reply_to %q, want %d", e.ReplyTo, dm.Message.MessageID))
	}
	if e := evs[3]; e.Source.UserID != itoa(ada.ID) || e.Source.MessageID != itoa(dm.Message.MessageID) || e.Text != "root" {
		errs = append(errs, fmt.Errorf("DM: user_id %q message_id %q text %q", e.Source.UserID, e.Source.MessageID, e.Text))
	}
	return "topic → forum+thread; General (flagged or not), General reply and DM chain → no thread", joinErrors(errs)
}

// checkGating: unaddressed group messages are observed; mentions and replies to the bot are
// turns; DMs are turns.
func (s *suite) checkGating() (string, error) {
	bot := s.bot(profInbound)
	s.tg.AddGroup(groupID, "Conformance group")
	chatter := bot.GroupText(groupID, ada, "just chatting")
	mention := bot.MentionText(groupID, ada, "are you there?")
	// The bot's own earlier answer, sent through the API so that no update is queued for it.
	mine, err := s.botSays(bot, groupID, "earlier answer")
	if err != nil {
		return "", err
	}
	reply := bot.InjectMessage(tgt.Message{From: &bob, Chat: tgt.Chat{ID: groupID, Type: tgt.Group}, Text: "thanks",
		ReplyToMessage: &tgt.Message{MessageID: mine}})
	dm := bot.PrivateText(bob, "private question")
	evs, err := s.pollFor(profInbound, chatter, mention, reply, dm)
	if err != nil {
		return "", err
	}
	var errs []error
	want := []struct {
		name string
		kind string
	}{{"unmentioned group message", abi.EventObserve}, {"mention", abi.EventMessage}, {"reply to the bot", abi.EventMessage}, {"DM", abi.EventMessage}}
	for i, w := range want {
		if kind := kindOf(evs[i]); kind != w.kind {
			errs = append(errs, fmt.Errorf("%s: kind %q, want %q", w.name, kind, w.kind))
		}
	}
	if evs[1].Source.ChatType != abi.ChatGroup {
		errs = append(errs, fmt.Errorf("group message: chat_type %q", evs[1].Source.ChatType))
	}
	return "observe / message / message / message", joinErrors(errs)
}

// checkCommands: "/cmd@us args" becomes "/cmd args"; "/cmd@other_bot" is ignored.
func (s *suite) checkCommands() (string, error) {
	bot := s.bot(profInbound)
	other := bot.GroupText(groupID, ada, "/new@some_other_bot")
	ours := bot.Command(groupID, ada, "resume", "42")
	evs, err := s.pollFor(profInbound, ours)
	if err != nil {
		if strings.Contains(err.Error(), updateID(other)) {
			return "", fmt.Errorf("a command addressed to another bot became an event: %w", err)
		}
		return "", err
	}
	if e := evs[0]; e.Text != "/resume 42" || kindOf(e) != abi.EventMessage {
		return "", fmt.Errorf("command to the bot: kind %q text %q, want message %q", kindOf(e), e.Text, "/resume 42")
	}
	return "/resume@bot 42 → /resume 42; /new@some_other_bot ignored", nil
}

// checkSkips: messages from bots and other service messages are not events; edits are not
// turns; channel posts without "from" are mapped without crashing; the two service messages of
// a group's upgrade to a supergroup each become an observe event in the new chat naming the old
// one (migrate_from_chat_id), so that the host carries the group's conversations over.
func (s *suite) checkSkips() (string, error) {
	bot := s.bot(profInbound)
	fromBot := bot.BotText(groupID, tgt.Person(999001, "Other Bot"), "@"+bot.Username()+" beep")
	orig := bot.PrivateText(ada, "tpyo")
	edit, _ := bot.EditText(ada.ID, orig.Message.MessageID, "typo")
	migrate1, migrate2 := bot.Migration(migFromID, migToID)
	title := bot.InjectMessage(tgt.Message{From: &ada, Chat: tgt.Chat{ID: groupID, Type: tgt.Group}})
	post := bot.ChannelPost(channelID, "channel news")
	got := map[string]abi.InboundEvent{}
	// Poll until Telegram has confirmed everything: one poll after the last batch.
	for i, deadline := 0, time.Now().Add(s.opts.Timeout); i < maxPolls && bot.Confirmed() < post.UpdateID && time.Now().Before(deadline); i++ {
		res, err := s.poll(profInbound)
		if err != nil {
			return "", err
		}
		for _, e := range res.Events {
			got[e.ID] = e
		}
	}
	var errs []error
	for _, u := range []tgt.Update{fromBot, title} {
		if e, ok := got[updateID(u)]; ok {
			errs = append(errs, fmt.Errorf("update %d (%s) became an event: %q", u.UpdateID, describeUpdate(u), e.Text))
		}
	}
	for _, u := range []tgt.Update{migrate1, migrate2} {
		e, ok := got[updateID(u)]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("migration service message %d was dropped: the supergroup would start a fresh conversation", u.UpdateID))
		case kindOf(e) != abi.EventObserve || e.Source.ChatID != itoa(migToID) || e.MigrateFromChatID != itoa(migFromID):
			errs = append(errs, fmt.Errorf("migration service message %d became %s in chat %s from %q, want observe in %d from %d",
				u.UpdateID, kindOf(e), e.Source.ChatID, e.MigrateFromChatID, migToID, migFromID))
		}
	}
	if _, ok := got[updateID(orig)]; !ok {
		errs = append(errs, errors.New("the original DM was lost"))
	}
	if e, ok := got[updateID(edit)]; ok && kindOf(e) == abi.EventMessage {
		errs = append(errs, errors.New("an edited message started a turn"))
	}
	if e, ok := got[updateID(post)]; ok && e.Source.ChatType != abi.ChatChannel {
		errs = append(errs, fmt.Errorf("channel post: chat_type %q", e.Source.ChatType))
	}
	return fmt.Sprintf("%d events from 7 updates; migration → migrate_from_chat_id", len(got)), joinErrors(errs)
}

// botSays sends text as bot into chat through the fake's API (as the bot's earlier answer) and
// returns the message id.
func (s *suite) botSays(bot *tgt.Bot, chat int64, text string) (int64, error) {
	resp, err := s.tg.Client().PostForm(s.tg.BotURL(bot.Token())+"/sendMessage",
		url.Values{"chat_id": {itoa(chat)}, "text": {text}})
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var r struct {
		OK     bool        `json:"ok"`
		Result tgt.Message `json:"result"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || !r.OK {
		return 0, fmt.Errorf("sending the bot's own message through the fake: %v (status %d)", err, resp.StatusCode)
	}
	return r.Result.MessageID, nil
}

func describeUpdate(u tgt.Update) string {
	if m := u.Payload(); m != nil && m.From != nil && m.From.IsBot {
		return "from a bot"
	}
	return "service message"
}

func kindOf(e abi.InboundEvent) string {
	if e.Kind == "" {
		return abi.EventMessage
	}
	return e.Kind
}

// --- sending ---

// send calls the adapter's send for the send profile, remembering which token the chat must see.
func (s *suite) send(msg abi.OutboundMessage) (*abi.SendResult, error) {
	if id, ok := parseID(msg.ChatID); ok {
		s.sendTokens[id] = tokens[profSend]
	}
	return s.p.Send(s.ctx, profSend, msg)
}

func (s *suite) sendOK(msg abi.OutboundMessage) ([]string, error) {
	res, err := s.send(msg)
	if err != nil {
		return nil, fmt.Errorf("send: %w", err)
	}
	if res.Error != nil {
		return nil, fmt.Errorf("send refused: %s %s: %s", res.Error.Kind, res.Error.Code, res.Error.Message)
	}
	return res.MessageIDs, nil
}

func (s *suite) sendFail(msg abi.OutboundMessage) (*abi.SendError, error) {
	res, err := s.send(msg)
	if err != nil {
		return nil, fmt.Errorf("send failed as a call (want a typed SendError): %w", err)
	}
	if res.Error == nil {
		return nil, fmt.Errorf("send succeeded (ids %v), want a typed failure", res.MessageIDs)
	}
	return res.Error, nil
}

// requests counts finished requests for method to chat.
func (s *suite) requests(method string, chat int64) []tgt.Request {
	var out []tgt.Request
	for _, r := range s.tg.Requests(method, chat) {
		if r.Status != 0 || r.Fault != "" {
			out = append(out, r)
		}
	}
	return out
}

const (
	sendForum   = int64(-1001700000011)
	sendPrivate = int64(111011)
)

// checkSendTopics: a topic's messages go to the topic; the General topic's id is omitted; a
// reply replies.
func (s *suite) checkSendTopics() (string, error) {
	forum, topics := s.tg.AddForum(sendForum, "Send forum", tgt.Topic{Name: "ops"})
	chat, topic := itoa(forum.ID), itoa(topics[0])
	ids, err := s.sendOK(abi.OutboundMessage{ChatType: abi.ChatForum, ChatID: chat, ThreadID: topic, Text: "into the topic"})
	if err != nil {
		return "", err
	}
	if got := s.tg.SentTexts(forum.ID, topics[0]); len(got) != 1 {
		return "", fmt.Errorf("topic %d holds %q, want the message", topics[0], got)
	}
	if len(ids) != 1 {
		return "", fmt.Errorf("message_ids %v, want the sent message's id", ids)
	}
	if _, err := s.sendOK(abi.OutboundMessage{ChatType: abi.ChatForum, ChatID: chat, ThreadID: "1", Text: "into General"}); err != nil {
		return "", fmt.Errorf("General topic: %w", err)
	}
	if got := s.tg.SentTexts(forum.ID, 0); len(got) != 1 {
		return "", fmt.Errorf("General holds %q, want the message", got)
	}
	if reqs := s.requests("sendMessage", forum.ID); len(reqs) != 2 || reqs[1].Thread != 0 {
		return "", errors.New("sendMessage to the General topic carried message_thread_id 1 (or was retried)")
	}
	if _, err := s.sendOK(abi.OutboundMessage{ChatID: chat, ThreadID: topic, ReplyTo: ids[0], Text: "a reply"}); err != nil {
		return "", err
	}
	sent := s.tg.Sent(forum.ID, topics[0])
	if len(sent) != 2 || sent[1].Message.ReplyToMessage == nil || itoa(sent[1].Message.ReplyToMessage.MessageID) != ids[0] {
		return "", errors.New("reply_to was not sent as a reply")
	}
	if _, err := s.sendOK(abi.OutboundMessage{ChatID: chat, ThreadID: topic, ReplyTo: "999999", Text: "reply to a deleted message"}); err != nil {
		return "", fmt.Errorf("reply to a missing message (allow_sending_without_reply): %w", err)
	}
	return "topic, General without thread id, replies", nil
}

// checkThreadNotFound: "message thread not found" is retried once, in the same call, without
// message_thread_id.
func (s *suite) checkThreadNotFound() (string, error) {
	before := len(s.requests("sendMessage", sendForum))
	res, err := s.send(abi.OutboundMessage{ChatType: abi.ChatForum, ChatID: itoa(sendForum), ThreadID: "777777", Text: "topic deleted"})
	switch {
	case err != nil:
		return "", fmt.Errorf("send: %w", err)
	case res.Error != nil:
		return "", fmt.Errorf("send refused: %s %s: %s", res.Error.Kind, res.Error.Code, res.Error.Message)
	}
	reqs := s.requests("sendMessage", sendForum)[before:]
	if len(reqs) != 2 || reqs[0].Thread != 777777 || reqs[1].Thread != 0 {
		var th []int64
		for _, r := range reqs {
			th = append(th, r.Thread)
		}
		return "", fmt.Errorf("sendMessage threads %v, want [777777 0]", th)
	}
	if got := s.tg.SentTexts(sendForum, 0); len(got) == 0 || got[len(got)-1] != "topic deleted" {
		return "", errors.New("the retried message did not land in the chat")
	}
	if res.ThreadID == nil || *res.ThreadID != "" {
		return "", errors.New(`the result does not say the message went to the chat itself (thread_id ""): the host would record the deleted topic`)
	}
	return "2 requests, the second without message_thread_id; thread_id \"\" reported", nil
}

// checkUTF16: 4096 UTF-16 units (2048 astral emoji) are sent; anything longer is a permanent
// error and never reaches Telegram.
func (s *suite) checkUTF16() (string, error) {
	s.tg.AddPrivate(tgt.Person(sendPrivate, "Sendee"))
	chat := itoa(sendPrivate)
	before := len(s.requests("sendMessage", sendPrivate))
	if _, err := s.sendOK(abi.OutboundMessage{ChatID: chat, Text: strings.Repeat("😀", 2048)}); err != nil {
		return "", fmt.Errorf("4096 units: %w", err)
	}
	for _, text := range []string{strings.Repeat("😀", 2048) + ".", strings.Repeat("😀", 3000)} {
		e, err := s.sendFail(abi.OutboundMessage{ChatID: chat, Text: text})
		if err != nil {
			return "", fmt.Errorf("%d code points: %w", len([]rune(text)), err)
		}
		if e.Kind != abi.SendPermanent {
			return "", fmt.Errorf("over-long text: %s, want permanent", e.Kind)
		}
	}
	if n := len(s.requests("sendMessage", sendPrivate)) - before; n != 1 {
		return "", fmt.Errorf("%d sendMessage requests, want 1: over-long text must not be sent", n)
	}
	return "4096 units sent; 4097 and 6000 refused unsent", nil
}

// checkFlood: 429 is retryable with retry_after_ms = retry_after*1000, and send does not retry.
func (s *suite) checkFlood() (string, error) {
	s.tg.InjectFault("sendMessage", tgt.FloodWait(33).ForChat(sendPrivate))
	before := len(s.requests("sendMessage", sendPrivate))
	e, err := s.sendFail(abi.OutboundMessage{ChatID: itoa(sendPrivate), Text: "flooded"})
	if err != nil {
		return "", err
	}
	if e.Kind != abi.SendRetryable || e.RetryAfterMs != 33000 {
		return "", fmt.Errorf("429 mapped to %s retry_after_ms %d, want retryable 33000", e.Kind, e.RetryAfterMs)
	}
	if n := len(s.requests("sendMessage", sendPrivate)) - before; n != 1 {
		return "", fmt.Errorf("%d requests: send must not retry or sleep (the host does)", n)
	}
	return "retryable, retry_after_ms 33000, 1 request", nil
}

// checkMigrated: a group upgraded to a supergroup maps to a permanent failure carrying
// migrate_to_chat_id.
func (s *suite) checkMigrated() (string, error) {
	s.tg.MigrateGroup(oldGroupID, newGroupID)
	e, err := s.sendFail(abi.OutboundMessage{ChatType: abi.ChatGroup, ChatID: itoa(oldGroupID), Text: "hello group"})
	if err != nil {
		return "", err
	}
	if e.Kind != abi.SendPermanent || e.MigrateToChatID != itoa(newGroupID) {
		return "", fmt.Errorf("migrated group mapped to %s migrate_to_chat_id %q, want permanent %d", e.Kind, e.MigrateToChatID, newGroupID)
	}
	if n := len(s.requests("sendMessage", oldGroupID)); n != 1 {
		return "", fmt.Errorf("%d requests to the old group, want 1", n)
	}
	return "permanent, migrate_to_chat_id " + itoa(newGroupID), nil
}

// checkFailures: refusals (4xx) are permanent with Telegram's description; an HTML page that is
// not Telegram's answer before anything happened is retryable; the token never appears in a
// message.
func (s *suite) checkFailures() (string, error) {
	cases := []struct {
		name  string
		fault tgt.Fault
		kind  string
		text  string
	}{
		{"403 blocked", tgt.APIError(403, "Forbidden: bot was blocked by the user"), abi.SendPermanent, "blocked"},
		{"400 chat not found", tgt.APIError(400, "Bad Request: chat not found"), abi.SendPermanent, "chat not found"},
	}
	var errs []error
	for _, c := range cases {
		s.tg.InjectFault("sendMessage", c.fault.ForChat(sendPrivate))
		e, err := s.sendFail(abi.OutboundMessage{ChatID: itoa(sendPrivate), Text: c.name})
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: %w", c.name, err))
		case e.Kind != c.kind:
			errs = append(errs, fmt.Errorf("%s: %s, want %s", c.name, e.Kind, c.kind))
		case c.text != "" && !strings.Contains(e.Message, c.text):
			errs = append(errs, fmt.Errorf("%s: message %q lacks Telegram's description", c.name, e.Message))
		case strings.Contains(e.Message, tokens[profSend]):
			errs = append(errs, fmt.Errorf("%s: the bot token leaked into the error message", c.name))
		}
	}
	return "403/400 permanent with the description", joinErrors(errs)
}

// checkAmbiguous: answers that may follow the effect are never retryable (SPEC 2.6, "a possible
// gap is better than a duplicate"). Each fault here applies after Telegram posted the message:
// a 200 whose JSON is cut (Telegram executed it: success, or at least uncertain), a 200 whose
// body stops short, a 5xx (HTML or JSON), a reset. A plugin that answers retryable makes the
// host post the message twice.
func (s *suite) checkAmbiguous() (string, error) {
	cases := []struct {
		name  string
		fault tgt.Fault
		ok    bool // success is the right answer (uncertain is tolerated)
	}{
		{"200 with cut JSON", tgt.MalformedJSON().AfterEffect(), true},
		{"200 with a body cut short", tgt.TruncatedBody().AfterEffect(), false},
		{"HTML 502", tgt.ServerError(502).AfterEffect(), false},
		{"JSON 500", tgt.APIError(500, "Internal Server Error").AfterEffect(), false},
		{"connection reset", tgt.ConnectionReset().AfterEffect(), false},
	}
	var errs []error
	for _, c := range cases {
		s.tg.InjectFault("sendMessage", c.fault.ForChat(sendPrivate))
		before := len(s.requests("sendMessage", sendPrivate))
		text := "ambiguous: " + c.name
		res, err := s.send(abi.OutboundMessage{ChatID: itoa(sendPrivate), Text: text})
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: send failed as a call (want a typed result): %w", c.name, err))
			continue
		case res.Error == nil && !c.ok:
			errs = append(errs, fmt.Errorf("%s: reported delivered, want uncertain (the outcome is unknown)", c.name))
		case res.Error != nil && res.Error.Kind != abi.SendUncertain:
			errs = append(errs, fmt.Errorf("%s: %s, want %s: Telegram may have posted it, a resend duplicates it",
				c.name, res.Error.Kind, map[bool]string{true: "success", false: "uncertain"}[c.ok]))
		}
		if n := len(s.requests("sendMessage", sendPrivate)) - before; n != 1 {
			errs = append(errs, fmt.Errorf("%s: %d requests, want 1", c.name, n))
		}
		if n := countText(s.tg.SentTexts(sendPrivate, 0), text); n != 1 {
			errs = append(errs, fmt.Errorf("%s: posted %d times", c.name, n))
		}
	}
	return "200 cut → delivered; 5xx/reset/cut body → uncertain; each posted once", joinErrors(errs)
}

func countText(texts []string, text string) int {
	n := 0
	for _, t := range texts {
		if t == text {
			n++
		}
	}
	return n
}

// callTimeout is the call deadline the suite's runtime enforces.
func (s *suite) callTimeout() time.Duration {
	if s.opts.CallTimeout > 0 {
		return s.opts.CallTimeout
	}
	return 10 * time.Second // the runtime's default
}

// checkSlowSend: a sendMessage answered after the call deadline (the message is posted at
// once, the answer comes 2 s after the deadline) is a typed uncertain result, never a deadline
// crash, and the plugin stays active. The message was posted, so retryable (which the host
// resends) is wrong: the user would see it twice.
func (s *suite) checkSlowSend() (string, error) {
	slow := s.callTimeout() + 2*time.Second
	s.tg.InjectFault("sendMessage", tgt.Slow(slow).ForChat(sendPrivate))
	start := time.Now()
	res, err := s.send(abi.OutboundMessage{ChatID: itoa(sendPrivate), Text: "slow answer"})
	took := time.Since(start).Round(100 * time.Millisecond)
	switch {
	case err != nil:
		return "", fmt.Errorf("send answered after %v failed as a call (a crash counts against the breaker): %w", slow, err)
	case !s.p.Active():
		return "", errors.New("the plugin is no longer active")
	case res.Error == nil:
		return "", fmt.Errorf("reported delivered after %v although no answer came", took)
	case res.Error.Kind != abi.SendUncertain:
		return "", fmt.Errorf("%s after %v, want uncertain: the message was posted, a resend duplicates it", res.Error.Kind, took)
	}
	if n := countText(s.tg.SentTexts(sendPrivate, 0), "slow answer"); n != 1 {
		return "", fmt.Errorf("posted %d times", n)
	}
	return fmt.Sprintf("%s after %v (deadline %v)", res.Error.Kind, took, s.callTimeout()), nil
}

// checkSlowGetMe: a profile whose getMe is answered only after the call deadline is accepted
// at configure (not rejected, not a crash), and poll learns the identity later. It loads the
// plugin a second time, with that profile only.
func (s *suite) checkSlowGetMe() (string, error) {
	token := tokens[profSlowMe]
	s.tg.InjectFault("getMe", tgt.Slow(s.callTimeout()+time.Second).ForBot(token))
	cfg, _ := json.Marshal(map[string]any{"token": token, "api_base": s.tg.URL()})
	start := time.Now()
	p, err := host.LoadPlugin(s.ctx, s.path, host.PluginOptions{
		Env: s.env, Profiles: map[string]json.RawMessage{profSlowMe: cfg}, Egress: host.Egress{Extra: []string{"127.0.0.1"}},
		CallTimeout: s.opts.CallTimeout, CacheDir: s.opts.CacheDir,
	})
	if err != nil {
		return "", err
	}
	defer p.Close()
	took := time.Since(start).Round(100 * time.Millisecond)
	if problems := p.Info().Profiles[profSlowMe]; len(problems) > 0 {
		return "", fmt.Errorf("profile rejected when getMe was slow: %s", strings.Join(problems, "; "))
	}
	bot := s.tg.BotByToken(token)
	u := bot.PrivateText(ada, "are you there?")
	var got []abi.InboundEvent
	for i, deadline := 0, time.Now().Add(s.opts.Timeout); i < maxPolls && len(got) == 0 && time.Now().Before(deadline); i++ {
		res, err := p.Poll(s.ctx, profSlowMe, pollWait)
		if err != nil {
			return "", fmt.Errorf("poll after the slow start: %w", err)
		}
		got = append(got, res.Events...)
	}
	if err := sameIDs(got, []tgt.Update{u}); err != nil {
		return "", fmt.Errorf("poll after the slow start: %w", err)
	}
	return fmt.Sprintf("accepted (load %v), identity learned by poll", took), nil
}

// checkEdit: editMessageText replaces the text; "message is not modified" is success.
func (s *suite) checkEdit() (string, error) {
	chat := itoa(sendPrivate)
	ids, err := s.sendOK(abi.OutboundMessage{ChatID: chat, Text: "draft"})
	if err != nil {
		return "", err
	}
	if len(ids) != 1 {
		return "", fmt.Errorf("message_ids %v", ids)
	}
	for i := 0; i < 2; i++ {
		if _, err := s.sendOK(abi.OutboundMessage{ChatID: chat, EditMessageID: ids[0], Text: "final"}); err != nil {
			return "", fmt.Errorf("edit %d: %w", i+1, err)
		}
	}
	if m, ok := s.tg.Message(sendPrivate, parseIDOr(ids[0])); !ok || m.Text != "final" {
		return "", fmt.Errorf("message %s reads %q, want \"final\"", ids[0], m.Text)
	}
	return "edited; an identical edit succeeded", nil
}

// checkTyping: the typing action reaches sendChatAction, with the General topic's id kept.
func (s *suite) checkTyping() (string, error) {
	if _, err := s.sendOK(abi.OutboundMessage{ChatID: itoa(sendForum), ThreadID: "1", Action: "typing"}); err != nil {
		return "", err
	}
	acts := s.tg.Actions(sendForum)
	if len(acts) != 1 || acts[0].Action != "typing" {
		return "", fmt.Errorf("chat actions %+v, want one typing", acts)
	}
	return fmt.Sprintf("typing (thread %d)", acts[0].Thread), nil
}

// --- webhook ---

// checkWebhookRegistered: a webhook-mode profile registers its URL with the secret (in
// configure, or in poll), and Telegram's pushes become events.
func (s *suite) checkWebhookRegistered() (string, error) {
	bot := s.bot(profHook)
	for i, deadline := 0, time.Now().Add(s.opts.Timeout); i < maxPolls && bot.WebhookInfo().URL == "" && time.Now().Before(deadline); i++ {
		res, err := s.p.Poll(s.ctx, profHook, pollWait)
		if err != nil {
			return "", fmt.Errorf("poll in webhook mode: %w", err)
		}
		if len(res.Events) != 0 {
			return "", errors.New("poll in webhook mode returned events")
		}
	}
	if got := bot.WebhookInfo().URL; got != s.hookURL {
		return "", fmt.Errorf("webhook URL %q, want %q", got, s.hookURL)
	}
	sets := s.tg.Requests("setWebhook", 0)
	if len(sets) == 0 || sets[len(sets)-1].Params["secret_token"] != hookSecret {
		return "", errors.New("setWebhook without the profile's secret_token")
	}
	for _, r := range s.tg.Requests("getUpdates", 0) {
		if r.Token == tokens[profHook] {
			return "", errors.New("a webhook-mode profile called getUpdates")
		}
	}
	u := bot.MentionText(groupID-1, ada, "pushed")
	if err := s.tg.Wait(s.opts.Timeout, func() bool { return len(s.hook.got()) > 0 }); err != nil {
		return "", fmt.Errorf("no event from the pushed update (deliveries %+v)", bot.Deliveries())
	}
	if e := s.hook.got()[0]; e.ID != updateID(u) || kindOf(e) != abi.EventMessage {
		return "", fmt.Errorf("pushed update became %s %q", e.ID, kindOf(e))
	}
	return "setWebhook with secret_token; push → event", nil
}

// checkWebhookSecret: pushes without the secret header, or with another secret, are refused
// with a 4xx and no events; direct requests too.
func (s *suite) checkWebhookSecret() (string, error) {
	bot := s.bot(profHook)
	before := len(s.hook.got())
	var errs []error
	if bot.WebhookInfo().URL == "" {
		errs = append(errs, errors.New("no webhook registered, so no push could be checked"))
	}
	for _, mode := range []tgt.SecretMode{tgt.SecretWrong, tgt.SecretMissing} {
		if bot.WebhookInfo().URL == "" {
			break
		}
		bot.SetWebhookSecretMode(mode)
		n := len(bot.Deliveries())
		bot.PrivateText(ada, "forged")
		// Every attempt (the fake retries a refused push) must be over before the mode changes.
		if err := s.tg.Wait(s.opts.Timeout, func() bool { return len(bot.Pending()) == 0 }); err != nil {
			return "", fmt.Errorf("the forged push was never given up: %w", err)
		}
		for _, d := range bot.Deliveries()[n:] {
			if d.Status < 400 || d.Status > 499 {
				errs = append(errs, fmt.Errorf("push with secret %q (sent %v) answered %d, want 401/403", d.Secret, d.SecretSent, d.Status))
			}
		}
	}
	bot.SetWebhookSecretMode(tgt.SecretCorrect)
	body := []byte(`{"update_id": 1, "message": {"message_id": 1, "date": 1, "text": "forged",
	  "chat": {"id": 111001, "type": "private"}, "from": {"id": 111001, "first_name": "Ada"}}}`)
	for name, h := range map[string]map[string][]string{
		"no header":    nil,
		"wrong secret": {tgt.SecretHeader: {"not-" + hookSecret}},
		"empty secret": {tgt.SecretHeader: {""}},
	} {
		res, err := s.current().Webhook(s.ctx, profHook, abi.WebhookRequest{Method: "POST", Path: "/hooks/telegram/hook", Headers: h, Body: body})
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: webhook failed as a call: %w", name, err))
		case res.Response.Status < 400 || res.Response.Status > 499 || len(res.Events) != 0:
			errs = append(errs, fmt.Errorf("%s: answered %d with %d events", name, res.Response.Status, len(res.Events)))
		}
	}
	if n := len(s.hook.got()) - before; n != 0 {
		errs = append(errs, fmt.Errorf("forged pushes produced %d events", n))
	}
	return "wrong/missing secret → 4xx, no events", joinErrors(errs)
}

// --- profiles ---

// checkTokens: every request the adapter made used the token of the profile being served: sends
// to the send profile's chats, getUpdates only for poll-mode bots.
func (s *suite) checkTokens() (string, error) {
	var errs []error
	n := 0
	for _, r := range s.tg.Requests("", 0) {
		if r.Fault == "" && r.Status == 0 {
			continue
		}
		switch strings.ToLower(r.Method) {
		case "sendmessage", "editmessagetext", "sendchataction":
			n++
			if want, ok := s.sendTokens[r.ChatID]; ok && r.Token != want {
				errs = append(errs, fmt.Errorf("%s to chat %d used another profile's token", r.Method, r.ChatID))
			}
		}
	}
	known := map[string]bool{}
	for _, tok := range tokens {
		known[tok] = true
	}
	for _, r := range s.tg.Requests("", 0) {
		if !known[r.Token] && r.Token != "" {
			errs = append(errs, fmt.Errorf("%s with an unknown token", r.Method))
		}
	}
	return fmt.Sprintf("%d sends checked", n), joinErrors(errs)
}

// joinErrors joins errs on one line (a report detail), or returns nil.
func joinErrors(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Error()
	}
	return errors.New(strings.Join(msgs, "; "))
}

func parseID(s string) (int64, bool) {
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

func parseIDOr(s string) int64 {
	n, _ := parseID(s)
	return n
}
