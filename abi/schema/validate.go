package schema

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/hermes-host/hermes-host/abi"
)

var (
	compileOnce sync.Once
	compiler    *jsonschema.Compiler
	compileErr  error
	compiledMu  sync.Mutex
	compiled    = map[string]*jsonschema.Schema{}
)

// Validate checks data, one ABI message, against the message type name (a $defs entry, e.g.
// "SendResult"). Its error says what is wrong and where (the first failing place, as a JSON
// pointer), or that data is not JSON.
func Validate(name string, data []byte) error {
	sch, err := schemaOf(name)
	if err != nil {
		return err
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("not JSON: %v (%q)", firstLine(err.Error()), clip(data))
	}
	if err := sch.Validate(v); err != nil {
		var ve *jsonschema.ValidationError
		if errors.As(err, &ve) {
			return fmt.Errorf("not a valid %s: %s", name, firstLine(leaf(ve)))
		}
		return fmt.Errorf("not a valid %s: %v", name, err)
	}
	return nil
}

// ResultOf names the message type an export answers with ("SendResult" for send), or "" for a
// name that is not an export.
func ResultOf(export string) string {
	switch export {
	case abi.ExportDescribe:
		return "Manifest"
	case abi.ExportConfigure:
		return "ConfigureResult"
	case abi.ExportWebhook:
		return "WebhookResult"
	case abi.ExportPoll:
		return "PollResult"
	case abi.ExportSend:
		return "SendResult"
	case abi.ExportTick:
		return "TickResult"
	case abi.ExportJobs:
		return "JobsResult"
	}
	return ""
}

func schemaOf(name string) (*jsonschema.Schema, error) {
	compileOnce.Do(func() {
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
		if err != nil {
			compileErr = fmt.Errorf("abi schema: %w", err)
			return
		}
		c := jsonschema.NewCompiler()
		if err := c.AddResource("abi.schema.json", doc); err != nil {
			compileErr = fmt.Errorf("abi schema: %w", err)
			return
		}
		compiler = c
	})
	if compileErr != nil {
		return nil, compileErr
	}
	compiledMu.Lock()
	defer compiledMu.Unlock()
	if s := compiled[name]; s != nil {
		return s, nil
	}
	s, err := compiler.Compile("abi.schema.json#/$defs/" + name)
	if err != nil {
		return nil, fmt.Errorf("abi schema has no %s: %w", name, err)
	}
	compiled[name] = s
	return s, nil
}

// leaf returns the most specific cause of a validation error, with its location.
func leaf(ve *jsonschema.ValidationError) string {
	for len(ve.Causes) > 0 {
		ve = ve.Causes[0]
	}
	return "/" + strings.Join(ve.InstanceLocation, "/") + ": " + ve.Error()
}

func clip(b []byte) string {
	if len(b) > 60 {
		return string(b[:60]) + "…"
	}
	return string(b)
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}
