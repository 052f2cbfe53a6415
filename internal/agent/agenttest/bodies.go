package agenttest

import (
	"encoding/json"
	"fmt"
)

// Error bodies as the real servers send them, for replaying with Error. Each names the server and
// the situation; the shapes follow the servers' documented and reported error formats.
const (
	// Ollama (/v1/chat/completions) when the model's template declares no tool support: 400.
	OllamaNoTools = `{"error":{"message":"registry.ollama.ai/library/gemma:2b does not support tools","type":"api_error","param":null,"code":null}}`
	// Ollama when the model is not pulled: 404.
	OllamaModelNotFound = `{"error":{"message":"model \"llama3.2\" not found, try pulling it first","type":"api_error","param":null,"code":null}}`
	// Ollama's answer to a path it does not serve (base_url without /v1): 404, Go's plain text.
	OllamaNoRoute = "404 page not found"

	// llama.cpp server started without --jinja, asked with tools: 500.
	LlamaCppNeedsJinja = `{"error":{"code":500,"message":"tools param requires --jinja flag","type":"server_error"}}`
	// llama.cpp server when the prompt does not fit its context: 400.
	LlamaCppContext = `{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":9120,"n_ctx":8192}}`
	// llama.cpp server while the model is loading: 503.
	LlamaCppLoading = `{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}`
	// llama.cpp server started with --api-key, called with a wrong or no key: 401.
	LlamaCppBadKey = `{"error":{"code":401,"message":"Invalid API Key","type":"authentication_error"}}`

	// vLLM when the model name is not the served one: 404 (the older top-level error shape).
	VLLMModelNotFound = "{\"object\":\"error\",\"message\":\"The model `llama3` does not exist.\",\"type\":\"NotFoundError\",\"param\":null,\"code\":404}"
	// vLLM started without tool calling enabled, asked with tools: 400.
	VLLMNoToolChoice = `{"error":{"message":"\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set","type":"BadRequestError","param":null,"code":400}}`
	// vLLM when the prompt is longer than the model's context: 400.
	VLLMContext = `{"error":{"message":"This model's maximum context length is 4096 tokens. However, you requested 4608 tokens (4096 in the messages, 512 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}}`
	// vLLM's answer to a path it does not serve (base_url without /v1): 404 from FastAPI.
	VLLMNoRoute = `{"detail":"Not Found"}`
	// vLLM started with --api-key, called with a wrong key: 401.
	VLLMBadKey = `{"error":"Unauthorized"}`
)

// Body is a server's error answer: its status and body, named for the server and situation.
type Body struct {
	Name   string
	Status int
	Body   string
}

// Bodies are the error answers above with their statuses, for tests that replay every one.
var Bodies = []Body{
	{"ollama/no-tools", 400, OllamaNoTools},
	{"ollama/model-not-found", 404, OllamaModelNotFound},
	{"ollama/no-route", 404, OllamaNoRoute},
	{"llama.cpp/needs-jinja", 500, LlamaCppNeedsJinja},
	{"llama.cpp/context", 400, LlamaCppContext},
	{"llama.cpp/loading", 503, LlamaCppLoading},
	{"llama.cpp/bad-key", 401, LlamaCppBadKey},
	{"vllm/model-not-found", 404, VLLMModelNotFound},
	{"vllm/no-tool-choice", 400, VLLMNoToolChoice},
	{"vllm/context", 400, VLLMContext},
	{"vllm/no-route", 404, VLLMNoRoute},
	{"vllm/bad-key", 401, VLLMBadKey},
}

// Plant returns body with text added to the message a server shows (a proxy or a server that
// echoes the request's headers into its error does so): the error object's message, a
// top-level message, an error or detail string, or the end of a plain-text body.
func Plant(body, text string) string {
	var v map[string]any
	if json.Unmarshal([]byte(body), &v) != nil {
		return body + " " + text
	}
	switch e := v["error"].(type) {
	case map[string]any:
		e["message"] = fmt.Sprint(e["message"]) + " " + text
	case string:
		v["error"] = e + " " + text
	default:
		switch {
		case v["message"] != nil:
			v["message"] = fmt.Sprint(v["message"]) + " " + text
		case v["detail"] != nil:
			v["detail"] = fmt.Sprint(v["detail"]) + " " + text
		default:
			v["message"] = text
		}
	}
	b, _ := json.Marshal(v)
	return string(b)
}
