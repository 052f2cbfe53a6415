package sim

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hermes-host/hermes-host/conformance/echotest"
	"github.com/hermes-host/hermes-host/conformance/slacktest"
	"github.com/hermes-host/hermes-host/conformance/telegramtest"
	"github.com/hermes-host/hermes-host/conformance/yuanbaotest"
	"github.com/hermes-host/hermes-host/internal/store"
	"github.com/hermes-host/hermes-host/sdk/wasmbuild"
)

// Settle bounds the wait for the world to have nothing left to do once the schedule is over.
var Settle = 90 * time.Second

// Run applies the schedule to the world, waits until the world settles and returns what it
// recorded. Messages to one chat are sent in order, each once the platform saw the host take
// the one before (as a user who sees their message sent); chats, faults and host operations
// run side by side.
func (w *World) Run() *History {
	w.start = time.Now()
	stopHealth := w.sampleHealth()
	chats := map[string]chan func(){}
	var workers, async sync.WaitGroup
	for i, st := range w.sched.Steps {
		if d := time.Until(w.start.Add(time.Duration(st.At) * time.Millisecond)); d > 0 {
			time.Sleep(d)
		}
		switch st.Op {
		case OpSay:
			w.queue(chats, &workers, st.Chat, func() { w.say(st) })
		case OpFault:
			w.fault(st)
		case OpClock:
			w.jump(st)
		case OpStorm:
			async.Go(func() { w.storm(st) })
		case OpStore:
			async.Go(func() { w.storeFault(st) })
		case OpKill:
			async.Go(func() { w.kill(st) })
		case OpPause:
			if st.Target == TargetSender {
				// Sends into every Telegram chat that wait for slow answers (the plugin's few
				// instances busy, other sends waiting for one), for the pause to catch.
				for k, c := range tgChats(w.sched.Hosts) {
					w.fault(Step{Chat: c, Fault: FaultSlow, Method: "sendMessage"})
					say := Step{Op: OpSay, Chat: c, Text: fmt.Sprintf("%s (%d)", st.Text, k)}
					if c != st.Chat {
						say.Text = fmt.Sprintf("meanwhile %s", w.extraNonce())
					}
					w.queue(chats, &workers, c, func() { w.say(say) })
				}
			}
			async.Go(func() { w.pause(st) })
		case OpReplace:
			async.Go(func() { w.replace(st, i) })
		}
	}
	for _, q := range chats {
		close(q)
	}
	workers.Wait()
	async.Wait()
	w.settle()
	stopHealth()
	return w.collect()
}

// queue hands f to the worker that sends into chat, in order, starting the worker if needed.
func (w *World) queue(chats map[string]chan func(), workers *sync.WaitGroup, chat string, f func()) {
	q := chats[chat]
	if q == nil {
		q = make(chan func(), 1024)
		chats[chat] = q
		workers.Go(func() {
			for f := range q {
				f()
			}
		})
	}
	q <- f
}

// inbound records an event the driver is about to hand to a platform and returns its index.
func (w *World) inbound(in Inbound) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	in.At = time.Now()
	w.rec.Inbound = append(w.rec.Inbound, in)
	return len(w.rec.Inbound) - 1
}

func (w *World) accepted(i int) {
	w.mu.Lock()
	w.rec.Inbound[i].Accepted = true
	w.mu.Unlock()
}

// say sends one message (or command) of st into its chat, as a user of that platform.
func (w *World) say(st Step) {
	nonce := ""
	if ns := nonces(st.Text); len(ns) > 0 && command(st.Text) != "/resume" {
		nonce = ns[len(ns)-1]
	}
	text := st.Text
	platform, name, _ := strings.Cut(st.Chat, ":")
	in := Inbound{Nonce: nonce, Text: text, Admitted: !st.Stranger}
	switch platform {
	case "tg":
		from, thread := tgAnn, int64(0)
		switch {
		case name == "dm2":
			from = tgBob
		case name == "dm3":
			from = tgCat
		case strings.HasPrefix(name, "topic"):
			thread, _ = strconv.ParseInt(strings.TrimPrefix(name, "topic"), 10, 64)
			if thread == 12 {
				from = tgBob
			}
		}
		if st.Stranger {
			from = tgEve
		}
		var u telegramtest.Update
		i := -1
		if thread == 0 {
			in.Chat = ChatKey("telegram", strconv.FormatInt(from.ID, 10), "")
		} else {
			in.Chat = ChatKey("telegram", strconv.FormatInt(tgForum, 10), strconv.FormatInt(thread, 10))
		}
		w.mu.Lock() // the update id is known once queued; record it under the same lock
		if thread == 0 {
			u = w.tgBot.PrivateText(from, text)
		} else {
			u = w.tgBot.TopicText(tgForum, thread, from, text)
		}
		in.EventID, in.At = "update:"+strconv.FormatInt(u.UpdateID, 10), time.Now()
		w.rec.Inbound = append(w.rec.Inbound, in)
		i = len(w.rec.Inbound) - 1
		w.tgUpdates, w.tgIn = append(w.tgUpdates, u.UpdateID), append(w.tgIn, i)
		w.mu.Unlock()
	case "slack":
		w.saySlack(name, st, in)
	case "echo":
		w.sayEcho(name, st, in)
	case "yb":
		from := ybAnn
		if st.Stranger {
			from = ybEve
		}
		in.Chat = ChatKey("yuanbao", from.ID, "")
		w.mu.Lock()
		p := w.ybBot.DM(from, text)
		in.EventID, in.At = "msg:"+p.MsgID, time.Now()
		w.rec.Inbound = append(w.rec.Inbound, in)
		w.pushes, w.pushIn = append(w.pushes, p), append(w.pushIn, len(w.rec.Inbound)-1)
		w.mu.Unlock()
	}
}

// saySlack mentions the bot: the first message of a thread chat starts the thread in the
// channel; later ones reply in it. Commands are written !cmd (Slack keeps /cmd for itself).
func (w *World) saySlack(name string, st Step, in Inbound) {
	text := st.Text
	if strings.HasPrefix(text, "/") {
		text = "!" + text[1:]
	}
	user := slackUsers[0]
	if name == "th2" {
		user = slackUsers[1]
	}
	if st.Stranger {
		user = slackEve
	}
	var p slacktest.Posted
	switch {
	case name == "dm1" && st.Stranger:
		p = w.team.DM(slackEve, text)
		in.Chat = ChatKey("slack", w.slackEveD, "")
	case name == "dm1":
		p = w.team.DM(user, text)
		in.Chat = ChatKey("slack", w.slackD, "")
	default:
		w.mu.Lock()
		ts := w.threads[name]
		w.mu.Unlock()
		if ts == "" || st.Stranger {
			p = w.team.Mention(slackChan, user, text)
			ts = p.TS
			if !st.Stranger {
				w.mu.Lock()
				w.threads[name] = ts
				w.mu.Unlock()
			}
		} else {
			p = w.team.MentionReply(slackChan, ts, user, text)
		}
		in.Chat = ChatKey("slack", slackChan, ts)
	}
	in.EventID = "msg:" + slacktest.DefaultTeamID + ":" + chatOf(in.Chat) + ":" + p.TS
	i := w.inbound(in)
	w.mu.Lock()
	w.slackEv, w.slackIn = append(w.slackEv, p.EventIDs...), append(w.slackIn, i)
	w.slackEventsOf[in.EventID] = append(w.slackEventsOf[in.EventID], p.EventIDs...)
	w.mu.Unlock()
	// The next message in this chat waits until the host took this one (or Slack gave up).
	w.slack.Wait(20*time.Second, func() bool {
		for _, id := range p.EventIDs {
			if w.slack.Acked(id) || w.slack.GaveUp(id) {
				return true
			}
		}
		return false
	})
}

// chatOf is the chat id of a ChatKey.
func chatOf(key string) string {
	_, rest, _ := strings.Cut(key, ":")
	chat, _, _ := strings.Cut(rest, "/")
	return chat
}

// sayEcho posts the event to a host's webhook, as a platform does: again (with the same id)
// until a host answers 200, for at most a minute.
func (w *World) sayEcho(name string, st Step, in Inbound) {
	chat, thread, chatType := "e1", "", "dm"
	switch name {
	case "dm2":
		chat = "e2"
	case "outage": // the store fault's own chat, apart from the schedule's
		chat = "e8"
	case "t1":
		chat, thread, chatType = "e3", "t1", "forum"
	}
	user := "u1"
	if name == "dm2" {
		user = "u2"
	}
	if st.Stranger {
		chat, thread, chatType, user = "e9", "", "dm", "s9"
	}
	in.Chat = ChatKey("echo", chat, thread)
	in.EventID = "ev-" + in.Nonce
	if in.Nonce == "" {
		in.EventID = fmt.Sprintf("ev-%d", time.Now().UnixNano())
	}
	i := w.inbound(in)
	body, _ := json.Marshal(echotest.Inbound{ID: in.EventID, ChatType: chatType, ChatID: chat, ThreadID: thread, UserID: user, Text: st.Text})
	if chatType != "dm" {
		var m map[string]any
		json.Unmarshal(body, &m)
		m["mentioned"] = true
		body, _ = json.Marshal(m)
	}
	client := &http.Client{Timeout: 15 * time.Second}
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		up := w.upHosts()
		if len(up) == 0 {
			continue
		}
		addr := up[int(time.Now().UnixNano())%len(up)]
		resp, err := client.Post("http://"+addr+"/hooks/echo/main", "application/json", bytes.NewReader(body))
		if err != nil {
			continue
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			w.accepted(i)
			return
		}
	}
}

// fault queues one platform fault on the next matching call into st's chat.
func (w *World) fault(st Step) {
	platform, name, _ := strings.Cut(st.Chat, ":")
	w.mu.Lock()
	w.faults[platform+":"+st.Fault]++
	w.mu.Unlock()
	switch platform {
	case "tg":
		f := tgFault(st.Fault)
		if st.Method == "getUpdates" {
			if st.Fault == FaultNoAnswer || st.Fault == FaultSlow || st.Fault == Fault429 {
				f = telegramtest.ServerError(502) // a poll's own timeout is not a fault of the send path
			}
			w.tg.InjectFault("getUpdates", f)
			return
		}
		w.tg.InjectFault(st.Method, f.ForChat(tgChatID(st.Chat)))
	case "slack":
		ch := slackChan
		if name == "dm1" {
			ch = w.slackD
		}
		w.slack.InjectFault(st.Method, slackFault(st.Fault).ForChannel(ch))
	case "echo":
		w.echo.Fail(echoFault(st.Fault))
	case "yb":
		w.ybBot.FailSends(ybFault(st.Fault))
	}
}

// slowAnswer is slower than any plugin's send deadline (Telegram's 4 s, the call's 10 s).
const slowAnswer = 12 * time.Second

func tgFault(kind string) telegramtest.Fault {
	switch kind {
	case Fault5xxAfter:
		return telegramtest.ServerError(502).AfterEffect()
	case FaultReset:
		return telegramtest.ConnectionReset()
	case FaultResetAft:
		return telegramtest.ConnectionReset().AfterEffect()
	case FaultTruncated:
		return telegramtest.TruncatedBody().AfterEffect()
	case FaultNoAnswer:
		return telegramtest.NoAnswer()
	case FaultSlow:
		return telegramtest.Slow(slowAnswer)
	case Fault429:
		return telegramtest.FloodWait(2)
	}
	return telegramtest.ServerError(502)
}

func slackFault(kind string) slacktest.Fault {
	switch kind {
	case Fault5xxAfter:
		return slacktest.AfterEffect(slacktest.ServerError(500))
	case FaultReset:
		return slacktest.ConnectionReset()
	case FaultResetAft:
		return slacktest.AfterEffect(slacktest.ConnectionReset())
	case FaultTruncated:
		return slacktest.AfterEffect(slacktest.Truncated())
	case FaultNoAnswer:
		return slacktest.NoAnswer()
	case FaultSlow:
		return slacktest.Slow(slowAnswer)
	case Fault429:
		return slacktest.RateLimited(2)
	}
	return slacktest.ServerError(500)
}

func echoFault(kind string) echotest.Fault {
	switch kind {
	case Fault5xxAfter, FaultResetAft, FaultTruncated, FaultSlow:
		return echotest.Fault{Delay: slowAnswer} // taken, answered too late
	case FaultNoAnswer:
		return echotest.Fault{Hang: true}
	case Fault429:
		return echotest.Fault{Status: 429, RetryAfter: 1}
	}
	return echotest.Fault{Status: 502}
}

func ybFault(kind string) yuanbaotest.SendFault {
	switch kind {
	case Fault5xxAfter, FaultSlow:
		return yuanbaotest.SendFault{Delay: slowAnswer}
	case FaultResetAft, FaultTruncated:
		return yuanbaotest.SendFault{Drop: true}
	case FaultNoAnswer:
		return yuanbaotest.SendFault{NoAnswer: true}
	}
	return yuanbaotest.SendFault{Status: 500}
}

// jump moves the plugins' clock ahead (cron sees slots pass).
func (w *World) jump(st Step) {
	from := w.now()
	w.offset.Add(int64(time.Duration(st.Dur) * time.Millisecond))
	w.mu.Lock()
	w.rec.Clock = append(w.rec.Clock, ClockMove{At: time.Now(), From: from, To: from.Add(time.Duration(st.Dur) * time.Millisecond)})
	w.faults["clock-jump"]++
	w.mu.Unlock()
	w.writeClock()
}

// storm cuts the Yuanbao connection every 2 s for st.Dur, while a message goes to yb:dm1 every
// 4 s: replies certainly not sent must wait for the connection, not be given up.
func (w *World) storm(st Step) {
	from := time.Now()
	end := from.Add(time.Duration(st.Dur) * time.Millisecond)
	for n := 0; time.Now().Before(end); n++ {
		if n%2 == 0 {
			w.ybBot.Drop()
			text := "during the storm " + w.extraNonce()
			w.say(Step{Op: OpSay, Chat: "yb:dm1", Text: text}) // a push: it does not wait for the host
		} else {
			w.ybBot.Close(1001, "going away")
		}
		time.Sleep(2 * time.Second)
	}
	w.mu.Lock()
	w.rec.Outages = append(w.rec.Outages, Outage{Platform: "yuanbao", Span: Span{From: from, To: time.Now()}})
	w.faults["reconnect-storm"]++
	w.mu.Unlock()
}

// extraNonce is a nonce for a message a fault sends on its own (N7000x…N7999x).
func (w *World) extraNonce() string { return Nonce(7000 + int(w.extra.Add(1))%1000) }

// storeFault makes the store refuse writes for st.Dur, as another writer holding SQLite's lock
// does (a full disk looks the same to the host), and sends a message meanwhile so the inbox
// and the ledger try to write.
func (w *World) storeFault(st Step) {
	if w.pg != "" {
		return
	}
	db, err := store.Open(filepath.Join(w.hosts[0].data, "hermes.db"), store.Options{})
	if err != nil {
		w.logf("store fault: %v", err)
		return
	}
	defer db.Close()
	conn, err := db.Conn(context.Background())
	if err != nil {
		w.logf("store fault: %v", err)
		return
	}
	defer conn.Close()
	if _, err := conn.ExecContext(context.Background(), `BEGIN IMMEDIATE`); err != nil {
		w.logf("store fault: %v", err)
		return
	}
	from := time.Now()
	n := w.extraNonce()
	text := "during the outage " + n
	var say sync.WaitGroup
	say.Go(func() { w.sayEcho("outage", Step{Text: text}, Inbound{Nonce: n, Text: text, Admitted: true}) })
	time.Sleep(time.Duration(st.Dur) * time.Millisecond)
	conn.ExecContext(context.Background(), `ROLLBACK`)
	defer say.Wait() // the platform keeps posting the message until a host takes it
	w.mu.Lock()
	w.rec.StoreFaults = append(w.rec.StoreFaults, Span{From: from, To: time.Now()})
	w.faults["store-write-fault"]++
	w.mu.Unlock()
}

// kill kills host st.Host with SIGKILL (or, for TargetRunner, the host running the newest
// background process) and starts it again after st.Dur (0: never, unless it was the last host
// up).
func (w *World) kill(st Step) {
	h := w.hosts[st.Host%len(w.hosts)]
	if st.Target == TargetRunner {
		// Wait (a while) for a process to run, so the kill takes one down with its host.
		var r *host
		for deadline := time.Now().Add(15 * time.Second); r == nil && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			r = w.hostByPID(w.newestRunner())
		}
		if r != nil {
			h = r
		}
	}
	w.mu.Lock()
	if !h.up {
		w.mu.Unlock()
		return
	}
	h.up = false
	up := 0
	for _, o := range w.hosts {
		if o.up {
			up++
		}
	}
	w.faults["host-kill-9"]++
	w.rec.Interruptions++
	w.mu.Unlock()
	h.proc.Kill9()
	w.mu.Lock()
	w.rec.Hosts[h.life].To = time.Now()
	w.mu.Unlock()
	dur := st.Dur
	if dur == 0 && up == 0 {
		dur = 1000 // someone must serve
	}
	if dur == 0 {
		w.logf("host %d killed, left down", h.i)
		return
	}
	time.Sleep(time.Duration(dur) * time.Millisecond)
	// As a supervisor would: a host that exits at start (serve gives up on a database another
	// writer holds locked) is started again, for a while. Without it a world of one host waits
	// minutes for a host that never comes back.
	for try := 1; ; try++ {
		err := w.startHost(h)
		if err == nil {
			return
		}
		w.logf("restarting host %d (try %d): %v", h.i, try, err)
		if try == 20 {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// newestRunner is the pid of the host running the newest background process ("" if none runs).
func (w *World) newestRunner() string {
	var owner string
	w.db.QueryRowContext(context.Background(), `SELECT owner FROM processes WHERE state IN ('starting', 'running')
		ORDER BY started_at DESC LIMIT 1`).Scan(&owner)
	pid, _, _ := strings.Cut(owner, ":")
	return pid
}

// hostByPID is the host whose current process has pid (nil if none).
func (w *World) hostByPID(pid string) *host {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, h := range w.hosts {
		if h.up && h.pid == pid {
			return h
		}
	}
	return nil
}

// pause stops host st.Host for st.Dur (past its leases), then lets it go on. For TargetSender
// it waits (up to 20 s) until a send into st.Chat is in flight at the Telegram fake, and pauses
// the host holding that chat's lane.
func (w *World) pause(st Step) {
	h := w.hosts[st.Host%len(w.hosts)]
	if st.Target == TargetSender {
		chat := tgChatID(st.Chat)
		inFlight := func() bool {
			for _, r := range w.tg.Requests("sendMessage", chat) {
				if r.Status == 0 && strings.HasPrefix(r.Fault, "slow") {
					return true
				}
			}
			return false
		}
		if w.tg.Wait(20*time.Second, inFlight) != nil {
			w.logf("pause: no send into %s was in flight; pausing host %d", st.Chat, h.i)
		} else if s := w.hostByPID(w.laneHolder("telegram", strconv.FormatInt(chat, 10))); s != nil {
			h = s
		}
	}
	w.mu.Lock()
	if !h.up {
		w.mu.Unlock()
		return
	}
	life := h.life
	proc := h.proc
	w.faults["host-pause"]++
	w.rec.Interruptions++
	w.mu.Unlock()
	from := time.Now()
	proc.Pause()
	time.Sleep(time.Duration(st.Dur) * time.Millisecond)
	proc.Resume()
	w.mu.Lock()
	w.rec.Hosts[life].Paused = append(w.rec.Hosts[life].Paused, Span{From: from, To: time.Now()})
	w.mu.Unlock()
}

// laneHolder is the pid of the host holding the lease of a chat's delivery lane ("" if none).
// A lane is a session key's; the chat's rows in the ledger name it.
func (w *World) laneHolder(plugin, chat string) string {
	var holder string
	w.db.QueryRowContext(context.Background(), `SELECT holder FROM leases WHERE name IN
		(SELECT 'lane:' || lane FROM deliveries WHERE plugin = $1 AND chat_id = $2) LIMIT 1`, plugin, chat).Scan(&holder)
	if f := strings.Split(holder, ":"); len(f) == 3 { // lease.InstanceID: host:pid:random
		return f[1]
	}
	return ""
}

// tgChats are the world's Telegram chats with a lane of their own.
func tgChats(hosts int) []string {
	var out []string
	for _, c := range worldChats(hosts) {
		if strings.HasPrefix(c.Name, "tg:") && c.Name != "tg:topic12" {
			out = append(out, c.Name)
		}
	}
	return out
}

// tgChatID is the Telegram chat id of a world chat.
func tgChatID(name string) int64 {
	switch {
	case name == "tg:dm2":
		return tgBob.ID
	case name == "tg:dm3":
		return tgCat.ID
	case strings.HasPrefix(name, "tg:topic"):
		return tgForum
	}
	return tgAnn.ID
}

// replace replaces a plugin's file while the hosts serve: with another build of it, or with a
// file that is not Wasm, put right after st.Dur.
func (w *World) replace(st Step, i int) {
	dst := filepath.Join(w.plugins, st.Plugin+".wasm")
	dir := filepath.Join(w.root, "plugins", st.Plugin)
	w.mu.Lock()
	w.faults["plugin-replace"]++
	w.mu.Unlock()
	if st.Broken {
		good, err := wasmbuild.Build(dir)
		if err != nil {
			w.logf("replace: %v", err)
			return
		}
		tmp := dst + ".tmp"
		os.WriteFile(tmp, []byte("not wasm at all"), 0o644)
		os.Rename(tmp, dst)
		time.Sleep(time.Duration(st.Dur) * time.Millisecond)
		wasmbuild.CopyFile(good, dst)
		return
	}
	other, err := wasmbuild.BuildWith(dir, fmt.Sprintf("-X main.simBuild=%d", i))
	if err != nil {
		w.logf("replace: %v", err)
		return
	}
	wasmbuild.CopyFile(other, dst)
}

// sampleHealth asks host 0's /healthz every 200 ms until the returned stop is called.
func (w *World) sampleHealth() (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		client := &http.Client{Timeout: time.Second}
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			w.mu.Lock()
			h := w.hosts[0]
			addr, up := h.admin, h.up
			w.mu.Unlock()
			if !up {
				continue
			}
			s := HealthSample{At: time.Now()}
			if resp, err := client.Get("http://" + addr + "/healthz"); err == nil {
				var body struct{ Status string }
				json.NewDecoder(resp.Body).Decode(&body)
				resp.Body.Close()
				s.Status = body.Status
			}
			w.mu.Lock()
			w.rec.Health = append(w.rec.Health, s)
			w.mu.Unlock()
		}
	})
	return func() { close(done); wg.Wait() }
}

// settle waits until the world has nothing left to do: every update confirmed and event acked,
// no open inbox row, process event, delivery or process of a live host, twice in a row; and
// until a host that died has been gone long enough for the others to take its work over.
func (w *World) settle() {
	w.mu.Lock()
	var lastDeath time.Time
	for _, l := range w.rec.Hosts {
		if l.To.After(lastDeath) {
			lastDeath = l.To
		}
	}
	w.mu.Unlock()
	if d := time.Until(lastDeath.Add(Takeover + 3*time.Second)); d > 0 {
		time.Sleep(d)
	}
	deadline := time.Now().Add(Settle)
	quietFor := 0
	var why string
	for time.Now().Before(deadline) {
		why = w.busy()
		if why == "" {
			quietFor++
			if quietFor >= 3 {
				return
			}
		} else {
			quietFor = 0
		}
		time.Sleep(500 * time.Millisecond)
	}
	w.logf("the world did not settle within %v: %s", Settle, why)
}

// busy says what the world is still doing ("" when nothing).
func (w *World) busy() string {
	if n := len(w.tgBot.Pending()); n > 0 {
		return fmt.Sprintf("%d Telegram updates unconfirmed", n)
	}
	w.mu.Lock()
	events := append([]string(nil), w.slackEv...)
	pushes := append([]*yuanbaotest.Push(nil), w.pushes...)
	live := map[string]bool{}
	for _, h := range w.hosts {
		if h.up {
			live[h.pid] = true
		}
	}
	w.mu.Unlock()
	for _, id := range events {
		if !w.slack.Acked(id) && !w.slack.GaveUp(id) {
			return "a Slack event is not acknowledged"
		}
	}
	if w.sched.Hosts == 1 {
		for _, p := range pushes {
			if w.ybBot.Acked(p) == 0 && w.ybBot.Connected() {
				return "a Yuanbao push is not acknowledged"
			}
		}
	}
	ctx := context.Background()
	count := func(q string) int {
		var n int
		if err := w.db.QueryRowContext(ctx, q).Scan(&n); err != nil {
			return -1
		}
		return n
	}
	if n := count(`SELECT COUNT(*) FROM turn_inbox WHERE state IN ('received', 'queued', 'running')`); n != 0 {
		return fmt.Sprintf("%d inbox rows open", n)
	}
	if n := count(`SELECT COUNT(*) FROM process_events WHERE state IN ('pending', 'claimed')`); n != 0 {
		return fmt.Sprintf("%d process events undelivered", n)
	}
	if n := count(`SELECT COUNT(*) FROM deliveries WHERE state IN ('pending', 'sending')
		AND NOT (state = 'pending' AND reason LIKE 'unverifiable:%')`); n != 0 {
		return fmt.Sprintf("%d deliveries open", n)
	}
	rows, err := w.db.QueryContext(ctx, `SELECT id, owner FROM processes WHERE state IN ('starting', 'running')`)
	if err != nil {
		return "processes: " + err.Error()
	}
	defer rows.Close()
	for rows.Next() {
		var id, owner string
		rows.Scan(&id, &owner)
		if pid, _, _ := strings.Cut(owner, ":"); live[pid] {
			return "process " + id + " running"
		}
	}
	return ""
}

// queryDB runs q and calls scan for each row.
func queryDB(db *sql.DB, q string, scan func(*sql.Rows) error) error {
	rows, err := db.QueryContext(context.Background(), q)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}
