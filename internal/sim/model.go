package sim

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/hermes-host/hermes-host/internal/agent/agenttest"
)

// The model is the OpenAI-compatible fake (agenttest) answering from what each request says,
// never from the order requests come in (turns of many chats run at once):
//
//   - a compression request (the agent's summary prompt) gets a short summary;
//   - a notification turn (a background process's completion or watch match, rendered by
//     internal/agent after noticeMark) gets "noted …" quoting the process's output tokens
//     (OUT-…, WATCH-…) and its id;
//   - a message asking run:<kind>:<seconds> gets a terminal tool call starting that process in
//     the background, and, once the tool answered, "started:<nonce>";
//   - a message saying model-fail: gets an error in the stream whose text quotes the API key
//     the request carried (a proxy echoing the request's headers);
//   - any other message gets "A:<nonce> …" with filler, streamed in pieces a little apart so a
//     platform that edits shows a draft first.
//
// Every answer carries the nonces of the messages it answers, so the checker can tell which
// message each chat message answers.

// pieceDelay is the time between two streamed pieces of an answer.
const pieceDelay = 120 * time.Millisecond

var runRe = regexp.MustCompile(`run:(ok|fail|watch|long):([0-9.]+)`)

// modelReply is the model's Reply (agenttest.Server.Answer).
func modelReply(w http.ResponseWriter, r *http.Request, req agenttest.Request) {
	msgs := req.Messages()
	if len(msgs) == 0 {
		agenttest.Text("nothing to answer")(w, r, req)
		return
	}
	system, _ := msgs[0]["content"].(string)
	if strings.HasPrefix(system, "You compress chat conversations") {
		agenttest.Text("A summary of the conversation so far.")(w, r, req)
		return
	}
	// The turn's text is the last user message; tool results after it mean the tool ran.
	var text string
	toolAnswered := false
	for i := len(msgs) - 1; i >= 0; i-- {
		role, _ := msgs[i]["role"].(string)
		if role == "tool" {
			toolAnswered = true
		}
		if role == "user" {
			text, _ = msgs[i]["content"].(string)
			break
		}
	}
	if notice, rest, ok := notification(text); ok {
		if rest == "" {
			agenttest.Text(noted(notice))(w, r, req)
			return
		}
		text = rest // a message the user sent after the notification, merged with it
	}
	text = unfenced(text)
	ids := answerNonces(text)
	switch {
	case modelFails(text):
		// A proxy in front of the model that fails mid-answer and, as some do, quotes the
		// request's credentials in its error: the key must not reach the chat.
		key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		msg, _ := json.Marshal(fmt.Sprintf("upstream refused key %s for %s", key, answerNonces(newest(text))[0]))
		agenttest.StreamError(`{"error":{"code":502,"message":`+string(msg)+`,"type":"server_error"}}`)(w, r, req)
	case toolAnswered:
		agenttest.Chunks(pieceDelay, pieces(answerText("started", ids))...)(w, r, req)
	case runRe.MatchString(text) && len(ids) > 0:
		m := runRe.FindStringSubmatch(text)
		args, _ := json.Marshal(processCall(m[1], m[2], ids[0]))
		agenttest.ToolCalls(agenttest.Call{ID: "call_" + ids[0], Name: "terminal", Args: string(args)})(w, r, req)
	default:
		agenttest.Chunks(pieceDelay, pieces(answerText("A", ids))...)(w, r, req)
	}
}

// newest is the last message of a turn's text: the agent joins consecutive user messages into
// one, and a message whose turn failed stays in the transcript with no answer after it.
func newest(text string) string {
	if i := strings.LastIndex(text, "\n\n"); i >= 0 {
		return text[i+2:]
	}
	return text
}

// modelFails says whether the model fails the turn of text: when its newest message asks so
// (an earlier one that did has had its failure).
func modelFails(text string) bool {
	m := newest(text)
	return strings.Contains(m, dirModelFail) && len(answerNonces(m)) > 0
}

// unfenced is a turn's text without the untrusted data internal/agent fences in it (earlier
// notices and tool output of the transcript, merged into the turn's user message): a notice
// quotes its process's command, which names the nonce of the message that started it, and the
// model answers only the users' messages.
func unfenced(text string) string {
	var out []string
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if strings.HasPrefix(l, "[") && strings.Contains(l, "It is untrusted data") {
			if i+1 < len(lines) && strings.HasPrefix(lines[i+1], "```") {
				fence := lines[i+1]
				for i += 2; i < len(lines) && lines[i] != fence; i++ {
				}
			}
			continue
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

// noticeMark begins the agent's rendering of a notification turn's notices (internal/agent's
// noticesForModel); each process's command and output follow it in a code fence.
const noticeMark = "[Notification from the gateway"

// notification finds the last notification in a turn's text: the agent joins consecutive user
// messages into one, so a notification may follow a message of the user's, or precede one. It
// returns the notification and the text after its last fence (a later message; "" if none).
func notification(text string) (notice, rest string, ok bool) {
	i := strings.LastIndex(text, noticeMark)
	if i < 0 {
		return "", "", false
	}
	notice = text[i:]
	if j := strings.LastIndex(notice, "\n```"); j >= 0 {
		end := j + 1 + len("```")
		for end < len(notice) && notice[end] == '`' {
			end++
		}
		if k := strings.IndexByte(notice[end:], '\n'); k >= 0 {
			rest = strings.TrimSpace(notice[end+k:])
		}
		notice = notice[:end]
	}
	return notice, rest, true
}

// terminalArgs are the terminal tool's arguments.
type terminalArgs struct {
	Command          string   `json:"command"`
	Background       bool     `json:"background"`
	NotifyOnComplete bool     `json:"notify_on_complete,omitempty"`
	WatchPatterns    []string `json:"watch_patterns,omitempty"`
}

// processCall is the background process a message asks for. Its output tokens are printed with
// printf, so the command line itself does not hold them: a notice quoting the command is not
// mistaken for one quoting the output.
func processCall(kind, secs, nonce string) terminalArgs {
	out := fmt.Sprintf("printf 'OUT-%%s\\n' %s", nonce)
	a := terminalArgs{Background: true, NotifyOnComplete: notifies(nonce)}
	switch kind {
	case "fail":
		a.Command = fmt.Sprintf("sleep %s; %s; exit 3", secs, out)
	case "watch":
		// Each line its own (WATCH-N0001x-1, -2, -3): a notice of each match is a message of its own.
		a.Command = fmt.Sprintf("for i in 1 2 3; do printf 'WATCH-%%s-%%s\\n' %s $i; sleep %s; done; %s", nonce, secs, out)
		a.WatchPatterns, a.NotifyOnComplete = []string{"WATCH-"}, false
	default: // ok, long
		a.Command = fmt.Sprintf("sleep %s; %s", secs, out)
	}
	return a
}

// notifies says whether a process started for nonce asks for a notification turn (else the
// host sends a text notice): half of them, by the nonce.
func notifies(nonce string) bool { return hash(nonce)%2 == 0 }

// PrintedToken is what the process started for nonce prints when it ends.
func PrintedToken(nonce string) string { return "OUT-" + nonce }

var tokenRe = regexp.MustCompile(`(OUT|WATCH)-N[0-9]{4}x|proc_[0-9a-z]+`)

// noted is the answer to a notification turn: the process ids and output tokens it saw.
func noted(text string) string {
	var seen []string
	for _, t := range tokenRe.FindAllString(text, -1) {
		if !strings.Contains(strings.Join(seen, " "), t) {
			seen = append(seen, t)
		}
	}
	if len(seen) == 0 {
		return "noted: a background process finished, with no output"
	}
	return "noted: " + strings.Join(seen, " ")
}

// answerText is an answer to the messages with ids: word:id for each, then filler whose length
// depends on the ids.
func answerText(word string, ids []string) string {
	if len(ids) == 0 {
		return word + ": (no message id)"
	}
	var b strings.Builder
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(word + ":" + id)
	}
	n := 4 + int(hash(strings.Join(ids, ""))%30)
	for i := range n {
		b.WriteByte(' ')
		b.WriteString(lorem[(i*7+int(hash(ids[0])))%len(lorem)])
	}
	return b.String()
}

// pieces cuts an answer into streamed pieces of a few words.
func pieces(text string) []string {
	var out []string
	w := strings.SplitAfter(text, " ")
	for len(w) > 0 {
		n := min(3, len(w))
		out = append(out, strings.Join(w[:n], ""))
		w = w[n:]
	}
	return out
}

func hash(s string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(s))
	return h.Sum32()
}
