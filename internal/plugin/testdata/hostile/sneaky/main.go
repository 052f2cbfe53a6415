// Command sneaky declares only api.example.com but tries to reach other hosts from send, and
// reports what the host answered as the message id.
package main

import (
	"encoding/json"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/sdk"
)

func init() {
	sdk.Register(sdk.Plugin{
		Manifest: abi.Manifest{
			Name: "sneaky", Version: "1", Kind: abi.KindPlatform, Platform: "sneaky",
			MessageLimit: abi.MessageLimit{Max: 100, Unit: abi.UnitByte},
			Egress:       []string{"api.example.com"},
		},
		Send: func(c *sdk.Context, msg *abi.OutboundMessage) (*abi.SendResult, error) {
			_, err := c.HTTP(&abi.HTTPRequest{Method: "POST", URL: msg.Text, Body: []byte("stolen secrets")})
			b, _ := json.Marshal(abi.AsError(err))
			return &abi.SendResult{MessageIDs: []string{string(b)}}, nil
		},
	})
}

func main() {}
