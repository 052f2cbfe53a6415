package sim

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
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
	Dur    int    `json:"dur_ms,omitempty"` // how long a fault lasts (a storm, a store fault, a pause, a host down)
	// Plugin is the plugin a hot replace replaces; Broken writes a file that is not Wasm.
	Plugin string `json:"plugin,omitempty"`
	Broken bool   `json:"broken,omitempty"`
}

// Operations.
const (
	OpSay     = "say"     // a chat message (or command) from a user
	OpFault   = "fault"   // a platform fault on the next matching call of Chat's platform
	OpStorm   = "storm"   // the platform's connection is cut every 2 s for Dur
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

// Generate makes the schedule of seed for shape. The same seed and shape give the same schedule.
func Generate(seed uint64, shape Shape) *Schedule {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	s := &Schedule{Seed: seed, Hosts: max(shape.Hosts, 1)}
	chats := worldChats(s.Hosts)
	users := map[string]bool{}
	at := 0
	gap := max(shape.Span/max(shape.Steps, 1), 50)
	for i := 0; len(s.Steps) < shape.Steps; i++ {
		at += rng.IntN(2 * gap)
		chat := chats[rng.IntN(len(chats))]
		st := Step{At: at, Chat: chat.Name}
		switch r := rng.IntN(100); {
		case r < 40:
			st.Op, st.Text = OpSay, fmt.Sprintf("hello %s %s", words(rng, 1+rng.IntN(4)), Nonce(i))
		case r < 55:
			kind := procKinds[rng.IntN(len(procKinds))]
			secs := fmt.Sprintf("%.1f", 0.2+rng.Float64()*2)
			if kind == "long" {
				secs = fmt.Sprint(6 + rng.IntN(6))
			}
			st.Op, st.Text = OpSay, fmt.Sprintf("please %s%s:%s %s", dirRun, kind, secs, Nonce(i))
		case r < 67:
			cmds := []string{"/new", "/reset", "/stop", "/compress", "/branch", "/resume"}
			cmd := cmds[rng.IntN(len(cmds))]
			st.Op, st.Text = OpSay, cmd+" "+Nonce(i)
			if cmd == "/resume" {
				st.Text = "/resume" // lists the chat's sessions
			}
		case r < 71:
			st.Op, st.Stranger = OpSay, true
			st.Text = fmt.Sprintf("hello from a stranger %s", Nonce(i))
			if !chat.Strangers {
				continue
			}
		case r < 90:
			st.Op, st.Fault = OpFault, faultKinds[rng.IntN(len(faultKinds))]
			st.Method = chat.Methods[rng.IntN(len(chat.Methods))]
		case r < 92:
			st.Op, st.Chat, st.Dur = OpStorm, "yb:dm1", 4000+rng.IntN(20000)
			if !slices.ContainsFunc(chats, func(c chatSpec) bool { return c.Name == "yb:dm1" }) {
				continue
			}
		case r < 94:
			if s.Hosts > 1 {
				continue // the store fault holds SQLite's write lock
			}
			st.Op, st.Chat, st.Dur = OpStore, "", 3000+rng.IntN(5000)
		case r < 96:
			st.Op, st.Chat, st.Host, st.Dur = OpKill, "", rng.IntN(s.Hosts), 300+rng.IntN(2000)
			if s.Hosts > 1 && rng.IntN(3) == 0 {
				st.Dur = 0 // the host stays down: its processes must not vanish
			}
		case r < 98:
			if s.Hosts == 1 {
				continue // a pause past the leases matters where another host can take over
			}
			st.Op, st.Chat, st.Host, st.Dur = OpPause, "", rng.IntN(s.Hosts), 5500+rng.IntN(3000)
		case r < 99:
			st.Op, st.Chat, st.Dur = OpClock, "", 60_000*(1+rng.IntN(3))
		default:
			plugins := []string{"echo", "telegram"}
			st.Op, st.Chat, st.Plugin = OpReplace, "", plugins[rng.IntN(len(plugins))]
			if rng.IntN(2) == 0 {
				st.Broken, st.Dur = true, 1000+rng.IntN(3000)
			}
		}
		if st.Op == OpSay && !st.Stranger {
			users[st.Chat] = true
		}
		s.Steps = append(s.Steps, st)
	}
	// Every schedule ends with one message in each chat it used, so whatever an earlier fault
	// left owed to the chat ("the platform answers again") has a reason to show.
	for k, c := range chats {
		if users[c.Name] {
			at += gap
			s.Steps = append(s.Steps, Step{At: at, Op: OpSay, Chat: c.Name, Text: "last words " + Nonce(8000+k)})
		}
	}
	// Ops must not overlap their own kind on one host in ways the world cannot apply: a kill of
	// a host that is already down is skipped at run time (see drive.go).
	return s
}

var faultKinds = []string{Fault5xx, Fault5xxAfter, FaultReset, FaultResetAft, FaultTruncated, FaultNoAnswer, FaultSlow, Fault429}

var lorem = strings.Fields("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee zulu")

func words(rng *rand.Rand, n int) string {
	w := make([]string, n)
	for i := range w {
		w[i] = lorem[rng.IntN(len(lorem))]
	}
	return strings.Join(w, " ")
}
