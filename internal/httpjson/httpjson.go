// Package httpjson writes JSON answers for the host's HTTP handlers.
package httpjson

import (
	"encoding/json"
	"net/http"
)

// Write answers with status and v encoded as indented JSON.
func Write(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}
