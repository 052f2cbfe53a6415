package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/hermes-host/hermes-host/abi"
)

// hermes_log with a level the ABI does not name logs the line at info all the same and says so
// in its reply; a known level (or none) is a plain ok.
func TestLogWithAnUnknownLevel(t *testing.T) {
	var logs bytes.Buffer
	e := &Env{Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	c := Caller{Plugin: "p", Profile: "main"}
	call := func(level string) abi.Reply {
		req, _ := json.Marshal(abi.LogRequest{Level: level, Message: "line at " + level})
		out, _ := e.Invoke(context.Background(), c, abi.HostLog, req)
		var r abi.Reply
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatalf("reply %q: %v", out, err)
		}
		return r
	}
	for _, level := range []string{"debug", "info", "warn", "error", ""} {
		if r := call(level); !r.OK {
			t.Errorf("level %q: %+v", level, r)
		}
	}
	r := call("verbose")
	if r.OK || r.Error == nil || r.Error.Code != abi.CodeBadRequest || !strings.Contains(r.Error.Message, `unknown log level "verbose"`) {
		t.Fatalf("an unknown level: %+v", r)
	}
	if !strings.Contains(logs.String(), `level=INFO msg="line at verbose"`) || !strings.Contains(logs.String(), "unknown_level=verbose") {
		t.Fatalf("the line was not logged at info:\n%s", logs.String())
	}
}
