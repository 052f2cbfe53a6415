package agent

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestSummarize(t *testing.T) {
	zero, one, two, four, minus15 := 0, 1, 2, 4, -15
	cases := []struct {
		name string
		in   []Notice
		want string
	}{
		{
			name: "success, last five lines",
			in:   []Notice{{Kind: NoticeCompletion, ProcID: "proc_ab12", Command: "make test", State: StateExited, ExitCode: &zero, Output: "l1\nl2\nl3\nl4\nl5\nl6\nl7\n"}},
			want: "Your background job finished successfully.\nLast lines of output:\nl3\nl4\nl5\nl6\nl7\n(Full output: log proc_ab12)",
		},
		{
			name: "failure",
			in:   []Notice{{Kind: NoticeCompletion, ProcID: "proc_0123456789ab", Command: "false", State: StateExited, ExitCode: &two, Output: "boom", OutputCut: true}},
			want: "Your background job failed (exit 2).\nLast lines of output:\nboom\n(Full output: log proc_0123456789ab)",
		},
		{
			name: "killed with signal",
			in:   []Notice{{Kind: NoticeCompletion, ProcID: "proc_1", Command: "sleep 100", State: StateKilled, ExitCode: &minus15, Signal: "SIGTERM"}},
			want: "Your background job was stopped (SIGTERM).\n(Full output: log proc_1)",
		},
		{
			name: "killed without signal",
			in:   []Notice{{Kind: NoticeCompletion, ProcID: "proc_1", State: StateKilled}},
			want: "Your background job was stopped.\n(Full output: log proc_1)",
		},
		{
			name: "exit status unknown",
			in:   []Notice{{Kind: NoticeCompletion, ProcID: "proc_9", Command: "x", State: StateLost}},
			want: "Your background job ended, but its exit status is unknown.\n(Full output: log proc_9)",
		},
		{
			name: "lost with its host",
			in:   []Notice{{Kind: NoticeCompletion, ProcID: "proc_9", State: StateLost, Reason: ReasonHostLost, Message: "the host running it (h1) stopped"}},
			want: "I lost track of your background job: the host running it went down, so its outcome is unknown.\n(Full output: log proc_9)",
		},
		{
			name: "correction",
			in:   []Notice{{Kind: NoticeCorrection, ProcID: "proc_9", State: StateExited, ExitCode: &four, Output: "FAIL y"}},
			want: "Correction: your background job, which I reported as lost, failed (exit 4).\nLast lines of output:\nFAIL y\n(Full output: log proc_9)",
		},
		{
			name: "command and output do not decide",
			in:   []Notice{{Kind: NoticeCompletion, ProcID: "proc_2", Command: "echo 'killed exit code 7'", State: StateExited, ExitCode: &zero, Output: "killed exit code 7 SIGKILL lost"}},
			want: "Your background job finished successfully.\nLast lines of output:\nkilled exit code 7 SIGKILL lost\n(Full output: log proc_2)",
		},
		{
			name: "watch match with pattern",
			in:   []Notice{{Kind: NoticeWatchMatch, ProcID: "proc_w", Command: "tail -f app.log", Pattern: "ERROR", Line: "2024 ERROR disk full", Output: "ok\n2024 ERROR disk full"}},
			want: "Your background job printed a line matching \"ERROR\".\nLast lines of output:\nok\n2024 ERROR disk full\n(Full output: log proc_w)",
		},
		{
			name: "watch match without pattern",
			in:   []Notice{{Kind: NoticeWatchMatch, ProcID: "proc_w", Output: "ready"}},
			want: "Your background job printed a line you were watching for.\nLast lines of output:\nready\n(Full output: log proc_w)",
		},
		{
			name: "watch disabled",
			in:   []Notice{{Kind: NoticeWatchDisabled, ProcID: "proc_w", Message: "Watch patterns disabled for proc_w (3 strikes)"}},
			want: "Your background job matched its watch pattern too often, so I stopped watching it; I'll tell you when it finishes.\n(Full output: log proc_w)",
		},
		{
			name: "global watch breaker",
			in:   []Notice{{Kind: NoticeWatchPaused, Message: "More than 15 watch-pattern matches within 10s across background processes: watch notifications are paused for 30s."}},
			want: "Update about your background jobs:\nMore than 15 watch-pattern matches within 10s across background processes: watch notifications are paused for 30s.",
		},
		{
			name: "batch",
			in: []Notice{
				{Kind: NoticeCompletion, ProcID: "proc_a", Command: "a", State: StateExited, ExitCode: &zero, Output: "x"},
				{Kind: NoticeCompletion, ProcID: "proc_b", Command: "b", State: StateExited, ExitCode: &one, Output: "y"},
			},
			want: "2 background jobs finished: 1 succeeded, 1 did not.\n- proc_a: finished successfully\n  Last lines of output:\n  x\n- proc_b: failed (exit 1)\n  Last lines of output:\n  y",
		},
		{
			name: "mixed batch",
			in: []Notice{
				{Kind: NoticeCompletion, ProcID: "proc_aaaaaaaaaaaa", State: StateExited, ExitCode: &zero, Output: "x"},
				{Kind: NoticeCompletion, ProcID: "proc_bbbbbbbbbbbb", State: StateExited, ExitCode: &one},
				{Kind: NoticeWatchMatch, ProcID: "proc_cccccccccccc", Pattern: "up", Output: "up"},
			},
			want: "3 updates about your background jobs:\n- proc_aaaaaaaaaaaa: finished successfully\n  Last lines of output:\n  x\n- proc_bbbbbbbbbbbb: failed (exit 1)\n- proc_cccccccccccc: printed a watched line\n  Last lines of output:\n  up",
		},
		{
			name: "none",
			want: "Update about your background jobs:",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Summarize(c.in); got != c.want {
				t.Errorf("Summarize:\n got %q\nwant %q", got, c.want)
			}
		})
	}
}

func TestSummarizeClipsLongLines(t *testing.T) {
	zero := 0
	got := Summarize([]Notice{{Kind: NoticeCompletion, ProcID: "proc_1", ExitCode: &zero, Output: strings.Repeat("x", 500)}})
	lines := strings.Split(got, "\n")
	if len([]rune(lines[2])) != summaryTailLineChars || !strings.HasSuffix(lines[2], "…") {
		t.Errorf("line not clipped to %d runes: %q", summaryTailLineChars, lines[2])
	}
}

// The agent package reads no notice text back: no regular expression in it parses the host's
// own words (issue 28). The only ones it compiles are for text from elsewhere: an HTML error
// page, a bearer token to redact, the model's MEDIA: lines.
func TestNoRegexpReadsNotices(t *testing.T) {
	allowed := map[string]bool{reTag.String(): true, reBearer.String(): true, reMedia.String(): true}
	files, _ := filepath.Glob("*.go")
	fset := token.NewFileSet()
	found := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if pkg, ok := sel.X.(*ast.Ident); !ok || pkg.Name != "regexp" {
				return true
			}
			found++
			lit, ok := call.Args[0].(*ast.BasicLit)
			if !ok {
				t.Errorf("%s: regexp.%s of a non-literal", fset.Position(call.Pos()), sel.Sel.Name)
				return true
			}
			re, _ := strconv.Unquote(lit.Value)
			if !allowed[re] {
				t.Errorf("%s: regexp %q: the agent must not parse text with new regular expressions", fset.Position(call.Pos()), re)
			}
			return true
		})
	}
	if found != len(allowed) {
		t.Errorf("found %d regular expressions, want the %d known ones", found, len(allowed))
	}
}
