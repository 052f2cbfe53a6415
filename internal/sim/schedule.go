package sim

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
)

// Schedule is one run of the checker as data: the world's shape and the operations and faults
// to apply, each at a time relative to the run's start. Generate makes one from a seed; a
// schedule is printed as JSON, loaded back from a file (Load), shrunk (Shrink) and saved as a
// regression case (testdata/regress).
type Schedule struct {
	Seed uint64 `json:"seed"`
	// Hosts is how many hosts serve: 1 runs on SQLite, 2 or 3 share one PostgreSQL database.
	Hosts int    `json:"hosts"`
	Steps []Step `json:"steps"`
	// Note says what a saved case is about (for regression cases).
	Note string `json:"note,omitempty"`
}

// Step is one operation or fault.
type Step struct {
	At int    `json:"at_ms"` // when, in milliseconds after the run started
	Op string `json:"op"`    // one of the Op* constants
	// Chat is the world's name of a chat (see world.go: "tg:dm1", "slack:th1", "echo:dm1", …).
	Chat string `json:"chat,omitempty"`
	// Stranger sends as a user the access configuration does not admit.
	Stranger bool `json:"stranger,omitempty"`
	// Text is what a message says (with its nonce and the model's directives).
	Text string `json:"text,omitempty"`
	// Fault names a platform fault (Fault* constants); Method the call it strikes.
	Fault  string `json:"fault,omitempty"`
	Method string `json:"method,omitempty"`
	Host   int    `json:"host,omitempty"`
	// Target picks the host of a kill or pause by what it is doing (Target* constants).
	Target string `json:"target,omitempty"`
	Dur    int    `json:"dur_ms,omitempty"` // how long a fault lasts (a storm, a store fault, a pause, a host down)
	// Plugin is the plugin a hot replace replaces; Broken writes a file that is not Wasm.
	Plugin string `json:"plugin,omitempty"`
	Broken bool   `json:"broken,omitempty"`
}

// Operations.
const (
	OpSay     = "say"     // a chat message (or command) from a user
	OpFault   = "fault"   // a platform fault on the next matching call of Chat's platform
	OpStorm   = "storm"   // the platform's connection is cut every 2 s for Dur, with messages meanwhile
	OpStore   = "store"   // the store refuses writes for Dur (SQLite)
	OpKill    = "kill"    // host Host is killed (-9) and restarted after Dur (never, if Dur is 0)
	OpPause   = "pause"   // host Host is stopped (SIGSTOP) for Dur, then continued
	OpClock   = "clock"   // the cron test clock jumps Dur of test time ahead
	OpReplace = "replace" // Plugin's file is replaced while serving (by a broken file for Dur)
)

// Platform faults. "after" faults strike after the platform took the message.
const (
	Fault5xx       = "5xx"
	Fault5xxAfter  = "5xx-after"
	FaultReset     = "reset"
	FaultResetAft  = "reset-after"
	FaultTruncated = "truncated-after"
	FaultNoAnswer  = "no-answer"
	FaultSlow      = "slow" // answered after the plugin's deadline
	Fault429       = "429"
)

// Directives the model server (model.go) reads in a message.
const (
	dirRun = "run:" // run:<kind>:<seconds>: start a background process of that kind
	// dirModelFail makes the model fail mid-answer with an error quoting the API key.
	dirModelFail = "model-fail:"
)

// Process kinds a message can ask for.
var procKinds = []string{"ok", "fail", "watch", "long"}

// Load reads a schedule from a JSON file.
func Load(path string) (*Schedule, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var s Schedule
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if s.Hosts < 1 {
		s.Hosts = 1
	}
	return &s, nil
}

// JSON is the schedule as indented JSON.
func (s *Schedule) JSON() string {
	b, _ := json.MarshalIndent(s, "", " ")
	return string(b)
}

// Summary is a one-line description of the schedule.
func (s *Schedule) Summary() string {
	count := map[string]int{}
	for _, st := range s.Steps {
		k := st.Op
		if st.Op == OpFault {
			k = "fault:" + st.Fault
		}
		count[k]++
	}
	var parts []string
	for k, n := range count {
		parts = append(parts, fmt.Sprintf("%s×%d", k, n))
	}
	slices.Sort(parts)
	return fmt.Sprintf("seed %d, %d hosts, %d steps (%s)", s.Seed, s.Hosts, len(s.Steps), strings.Join(parts, " "))
}

// Shape says what Generate may put in a schedule.
type Shape struct {
	Hosts int
	Steps int // operations and faults
	Span  int // milliseconds the steps are spread over
}

// weights are how often Generate picks each kind of step, on one host and on several.
// "outlive" (a process, then /new or /reset in its chat while it runs: two steps) is picked only
// when aimed (-aim outlive=N), so that the seeds recorded before it replay the same schedules.
var weights = map[bool][]struct {
	kind string
	n    int
}{
	false: {{"say", 40}, {"run", 15}, {"cmd", 12}, {"stranger", 4}, {OpFault, 19}, {OpStorm, 2}, {OpStore, 3},
		{OpKill, 2}, {OpClock, 1}, {OpReplace, 2}, {"model-fail", 2}},
	true: {{"say", 34}, {"run", 16}, {"cmd", 10}, {"stranger", 3}, {OpFault, 17}, {OpKill, 6}, {OpPause, 8},
		{OpClock, 2}, {OpReplace, 2}, {"model-fail", 1}},
}

// Aim sets the weights of kinds of step ("storm=30,kill=10"; the kinds are those of weights) on
// one host and on several, so that a rare interaction is tried often: the schedules stay
// random, their mix changes. A kind a shape does not have is added to it.
func Aim(spec string) error {
	for _, kv := range strings.Split(spec, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		n, err := strconv.Atoi(v)
		if !ok || err != nil || n < 0 {
			return fmt.Errorf("aim %q: want kind=weight", kv)
		}
		known := false
		for multi, ws := range weights {
			found := false
			for i := range ws {
				if ws[i].kind == k {
					ws[i].n, found, known = n, true, true
				}
			}
			if !found && k != OpStorm && k != OpStore && k != OpPause { // a shape's own kinds only
				weights[multi] = append(ws, struct {
					kind string
					n    int
				}{k, n})
			}
		}
		if !known && !slices.Contains([]string{"say", "run", "outlive", "cmd", "stranger", "model-fail", OpFault, OpStorm, OpStore, OpKill, OpPause, OpClock, OpReplace}, k) {
			return fmt.Errorf("aim: no kind of step %q", k)
		}
	}
	return nil
}

func pick(rng *rand.Rand, multi bool) string {
	total := 0
	for _, w := range weights[multi] {
		total += w.n
	}
	r := rng.IntN(total)
	for _, w := range weights[multi] {
		if r < w.n {
			return w.kind
		}
		r -= w.n
	}
	return "say"
}

// Generate makes the schedule of seed for shape. The same seed and shape give the same schedule.
func Generate(seed uint64, shape Shape) *Schedule {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	s := &Schedule{Seed: seed, Hosts: max(shape.Hosts, 1)}
	multi := s.Hosts > 1
	chats := worldChats(s.Hosts)
	used := map[string]bool{}
	at := 0
	gap := max(shape.Span/max(shape.Steps, 1), 50)
	for i := 0; len(s.Steps) < shape.Steps; i++ {
		at += rng.IntN(2 * gap)
		chat := chats[rng.IntN(len(chats))]
		st := Step{At: at, Chat: chat.Name}
		switch pick(rng, multi) {
		case "say":
			st.Op, st.Text = OpSay, fmt.Sprintf("hello %s %s", words(rng, 1+rng.IntN(4)), Nonce(i))
		case "run":
			kind := procKinds[rng.IntN(len(procKinds))]
			secs := fmt.Sprintf("%.1f", 0.2+rng.Float64()*2)
			if kind == "long" {
				secs = fmt.Sprint(6 + rng.IntN(6))
			}
			st.Op, st.Text = OpSay, fmt.Sprintf("please %s%s:%s %s", dirRun, kind, secs, Nonce(i))
		case "outlive":
			// A background process that outlives its conversation: started, then the user leaves
			// the conversation (/new or /reset) while it runs. Its completion must not follow.
			secs := 3 + rng.IntN(3)
			st.Op, st.Text = OpSay, fmt.Sprintf("please %sok:%d %s", dirRun, secs, Nonce(i))
			s.Steps = append(s.Steps, st)
			used[st.Chat] = true
			at += 800 + rng.IntN(1200)
			st = Step{At: at, Chat: chat.Name, Op: OpSay, Text: leaveCommands[rng.IntN(len(leaveCommands))] + " " + Nonce(4000+i)}
		case "model-fail":
			st.Op, st.Text = OpSay, fmt.Sprintf("hello %s%s", dirModelFail, Nonce(i))
		case "cmd":
			cmds := []string{"/new", "/reset", "/stop", "/compress", "/branch", "/resume"}
			cmd := cmds[rng.IntN(len(cmds))]
			st.Op, st.Text = OpSay, cmd+" "+Nonce(i)
			if cmd == "/resume" {
				st.Text = "/resume" // lists the chat's sessions
			}
		case "stranger":
			if !chat.Strangers {
				continue
			}
			st.Op, st.Stranger = OpSay, true
			st.Text = fmt.Sprintf("hello from a stranger %s", Nonce(i))
		case OpFault:
			st.Op, st.Fault = OpFault, faultKinds[rng.IntN(len(faultKinds))]
			st.Method = chat.Methods[rng.IntN(len(chat.Methods))]
		case OpStorm:
			st.Op, st.Chat, st.Dur = OpStorm, "yb:dm1", 20000+rng.IntN(30000)
		case OpStore:
			st.Op, st.Chat, st.Dur = OpStore, "", 3000+rng.IntN(5000)
		case OpKill:
			st.Op, st.Chat, st.Host, st.Dur = OpKill, "", rng.IntN(s.Hosts), 300+rng.IntN(2000)
			if multi && rng.IntN(2) == 0 {
				// The host running the newest background process, left dead: its processes must
				// not vanish with it.
				st.Target, st.Dur = TargetRunner, 0
			}
		case OpPause:
			st.Op, st.Host, st.Dur = OpPause, rng.IntN(s.Hosts), 5500+rng.IntN(3000)
			st.Chat = ""
			if c := sendChat(rng, chats); c != "" && rng.IntN(2) == 0 {
				// The host sending into a chat, paused while its send waits for a slow answer.
				st.Target, st.Chat, st.Text = TargetSender, c, fmt.Sprintf("hello while paused %s", Nonce(i))
				st.Dur += 4500 // past the plugin's call deadline too: what waited for an instance gives up
			}
		case OpClock:
			st.Op, st.Chat, st.Dur = OpClock, "", 60_000*(1+rng.IntN(3))
		case OpReplace:
			plugins := []string{"echo", "telegram"}
			st.Op, st.Chat, st.Plugin = OpReplace, "", plugins[rng.IntN(len(plugins))]
			if rng.IntN(2) == 0 {
				st.Broken, st.Dur = true, 1000+rng.IntN(3000)
			}
		}
		if st.Op == OpSay && !st.Stranger || st.Target == TargetSender {
			used[st.Chat] = true
		}
		s.Steps = append(s.Steps, st)
	}
	// Every schedule ends with one message in each chat it used, so whatever an earlier fault
	// left owed to the chat ("the platform answers again") has a reason to show.
	for k, c := range chats {
		if used[c.Name] {
			at += gap
			s.Steps = append(s.Steps, Step{At: at, Op: OpSay, Chat: c.Name, Text: "last words " + Nonce(8000+k)})
		}
	}
	return s
}

// sendChat picks a chat whose sends a targeted pause can catch in flight ("" if none).
func sendChat(rng *rand.Rand, chats []chatSpec) string {
	var out []string
	for _, c := range chats {
		if strings.HasPrefix(c.Name, "tg:") { // the Telegram fake shows a request in flight
			out = append(out, c.Name)
		}
	}
	if len(out) == 0 {
		return ""
	}
	return out[rng.IntN(len(out))]
}

// Targets of host faults.
const (
	// TargetRunner kills the host running the newest background process (instead of Host).
	TargetRunner = "runner"
	// TargetSender pauses the host that sends into Chat, while a send of Text waits for an answer
	// slower than the pause (instead of Host).
	TargetSender = "sender"
)

var faultKinds = []string{Fault5xx, Fault5xxAfter, FaultReset, FaultResetAft, FaultTruncated, FaultNoAnswer, FaultSlow, Fault429}

var lorem = strings.Fields("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee zulu")

func words(rng *rand.Rand, n int) string {
	w := make([]string, n)
	for i := range w {
		w[i] = lorem[rng.IntN(len(lorem))]
	}
	return strings.Join(w, " ")
}
