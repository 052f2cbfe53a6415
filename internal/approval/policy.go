// Package approval is the human in the loop for dangerous commands: the operator's policy of
// which commands wait for a person (Policy), and the record of each request and its decision
// (Store), which a turn's tool waits on while the requester answers with a button or with
// /approve and /deny.
//
// A request is owned by the conversation that made it: it names the session key and the
// generation the turn started at. /new, /reset and /stop void the key's pending requests in the
// transaction of the transition, and a command approved all the same does not start, because
// the turn's tools check the generation inside the key's boundary before anything starts.
// Every outcome (approved, denied, expired, voided, and the denials of notification turns,
// which never ask) is a row of the approvals table, shown by `sessions show` and the console.
package approval

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Modes of a Policy.
const (
	ModeDangerous = "dangerous" // the default: commands matching DefaultRules or the operator's patterns
	ModeAll       = "all"       // every command a turn starts
	ModeOff       = "off"       // none: every granted command runs without asking
)

// DefaultTimeout is how long a request waits for its answer before it is denied.
const DefaultTimeout = 5 * time.Minute

// Rule is a kind of command that waits for approval: a name for people and the regular
// expression that finds it in a command line.
type Rule struct {
	Name string
	re   *regexp.Regexp
}

// word is what may come before a command word in a shell line: its start, a space, or an
// operator that starts another command.
const word = `(?:^|[\s;&|(` + "`" + `])`

// end is what may follow a command word: a space, an operator that ends the command, or the end.
const end = `(?:[\s;&|)` + "`" + `]|$)`

// DefaultRules are the commands that wait for approval in ModeDangerous. They are a net for
// mistakes, not a sandbox: a determined shell line can always hide a command from a pattern
// (the operator who needs a bound grants no shell, or sets mode all).
var DefaultRules = []Rule{
	{"recursive rm", regexp.MustCompile(word + `rm\s+(?:-\S+\s+)*(?:-[a-zA-Z]*[rR]|--recursive)`)},
	{"sudo", regexp.MustCompile(word + `(?:sudo|doas|su)` + end)},
	{"download piped to a shell", regexp.MustCompile(`(?:curl|wget|fetch)\b[^|]*\|\s*(?:sudo\s+)?(?:ba|z|k|da|fi)?sh\b`)},
	{"dd", regexp.MustCompile(word + `dd\s`)},
	{"mkfs", regexp.MustCompile(word + `mkfs(?:\.\w+)?` + end)},
	{"recursive chmod or chown", regexp.MustCompile(word + `ch(?:mod|own|grp)\s+(?:-\S+\s+)*-[a-zA-Z]*R`)},
	{"shutdown or reboot", regexp.MustCompile(word + `(?:shutdown|reboot|halt|poweroff)` + end)},
	{"fork bomb", regexp.MustCompile(`(?:\w+|:)\s*\(\)\s*\{[^}]*\|[^}]*&`)},
	{"write to a disk device", regexp.MustCompile(`>\s*/dev/(?:sd|hd|vd|xvd|nvme|mmcblk|disk)`)},
}

// Policy is the operator's choice of the commands that wait for a person, how long they wait,
// and who besides the requester may answer.
type Policy struct {
	Mode    string
	Rules   []Rule
	Timeout time.Duration
	// Approvers are users who may answer anyone's request, as "platform:user_id" (a requester
	// always may answer their own).
	Approvers []string
}

// NewPolicy builds a policy: mode "" is ModeDangerous, whose rules are DefaultRules and then
// patterns (Go regular expressions, each a rule of its own); timeout 0 is DefaultTimeout. A bad
// mode or pattern is an error naming it.
func NewPolicy(mode string, patterns []string, timeout time.Duration, approvers []string) (*Policy, error) {
	p := &Policy{Mode: mode, Timeout: timeout, Approvers: slices.Clone(approvers)}
	if p.Mode == "" {
		p.Mode = ModeDangerous
	}
	if p.Timeout <= 0 {
		p.Timeout = DefaultTimeout
	}
	switch p.Mode {
	case ModeDangerous, ModeAll, ModeOff:
	default:
		return nil, fmt.Errorf("approval.mode %q: want %s, %s or %s", mode, ModeDangerous, ModeAll, ModeOff)
	}
	p.Rules = slices.Clone(DefaultRules)
	for i, pat := range patterns {
		re, err := regexp.Compile(pat)
		if err != nil {
			return nil, fmt.Errorf("approval.patterns[%d]: %v", i, err)
		}
		p.Rules = append(p.Rules, Rule{Name: "pattern " + pat, re: re})
	}
	for i, a := range approvers {
		if platform, user, ok := strings.Cut(a, ":"); !ok || platform == "" || user == "" {
			return nil, fmt.Errorf("approval.approvers[%d] %q: want platform:user_id", i, a)
		}
	}
	return p, nil
}

// Needs reports whether command waits for approval, and the rule it matched ("every command"
// in ModeAll). A nil policy asks for nothing.
func (p *Policy) Needs(command string) (string, bool) {
	if p == nil {
		return "", false
	}
	switch p.Mode {
	case ModeOff:
		return "", false
	case ModeAll:
		return "every command", true
	}
	for _, r := range p.Rules {
		if r.re.MatchString(command) {
			return r.Name, true
		}
	}
	return "", false
}

// Approver reports whether the user of platform may answer anyone's request.
func (p *Policy) Approver(platform, user string) bool {
	return p != nil && user != "" && slices.Contains(p.Approvers, platform+":"+user)
}

// MayAnswer reports whether the user of platform may answer r: its requester, or an approver.
func (p *Policy) MayAnswer(r Record, platform, user string) bool {
	return (user != "" && platform == r.Platform && user == r.User) || p.Approver(platform, user)
}
