// Package abischema generates the JSON Schema of every message type in package abi, from the Go
// types themselves (github.com/invopop/jsonschema), so the schema an author in another language
// reads and the types the host decodes cannot drift apart: a test fails when the checked-in
// abi/schema/abi.schema.json differs from what Generate returns.
//
// Regenerate after changing a type in abi:
//
//	go test ./internal/abischema -update
package abischema

import (
	"encoding/json"
	"reflect"

	"github.com/invopop/jsonschema"

	"github.com/hermes-host/hermes-host/abi"
)

// Types are the message types the schema defines, by the name used under $defs.
func Types() []any {
	return []any{
		// Exports: requests the host sends and results the plugin returns.
		abi.Manifest{}, abi.ConfigureRequest{}, abi.ConfigureResult{},
		abi.WebhookRequest{}, abi.WebhookResult{}, abi.PollRequest{}, abi.PollResult{},
		abi.SendRequest{}, abi.SendResult{}, abi.TickRequest{}, abi.TickResult{},
		abi.JobsRequest{}, abi.JobsResult{}, abi.FetchRequest{}, abi.FetchResult{},
		abi.Error{},
		// Host functions: requests the plugin sends and replies the host returns, each reply
		// inside the envelope (Reply: ok, then result or error).
		abi.Reply{},
		abi.LogRequest{}, abi.ClockReply{},
		abi.KVGetRequest{}, abi.KVGetReply{}, abi.KVSetRequest{}, abi.KVDeleteRequest{},
		abi.HTTPRequest{}, abi.HTTPResponse{},
		abi.WSOpenRequest{}, abi.WSOpenReply{}, abi.WSSendRequest{}, abi.WSRecvRequest{}, abi.WSRecvReply{}, abi.WSCloseRequest{},
		abi.SessionRequest{}, abi.SessionRef{}, abi.ObserveRequest{}, abi.RedactRequest{}, abi.RedactReply{}, abi.SeedRequest{},
		abi.DispatchRequest{}, abi.DispatchReply{}, abi.HostSendRequest{}, abi.HostSendReply{},
		abi.AgentRequest{}, abi.AgentReply{},
	}
}

// Generate returns the schema document: a JSON Schema (draft 2020-12) whose $defs hold every
// type of Types, each referring to the others by "#/$defs/Name". It reads package abi's source
// for descriptions, so the working directory must be the module's root.
func Generate() ([]byte, error) {
	r := &jsonschema.Reflector{
		// Objects are closed: a misspelt field is an error, not silently ignored.
		AllowAdditionalProperties: false,
		DoNotReference:            false,
	}
	// Field and type descriptions come from the comments in package abi's source, read from
	// ./abi: Generate runs in the module's root directory.
	if err := r.AddGoComments("github.com/hermes-host/hermes-host", "./abi"); err != nil {
		return nil, err
	}
	doc := &jsonschema.Schema{
		Version:     jsonschema.Version,
		ID:          "https://github.com/hermes-host/hermes-host/abi/schema/abi.schema.json",
		Title:       "hermes-host plugin ABI " + abi.Current().String(),
		Description: "Every JSON message that crosses the plugin boundary. Generated from package abi; see abi/SPEC.md.",
		Definitions: jsonschema.Definitions{},
	}
	for _, t := range Types() {
		s := r.ReflectFromType(reflect.TypeOf(t))
		for name, def := range s.Definitions {
			doc.Definitions[name] = def
		}
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}
